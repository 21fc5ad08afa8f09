"""The event log's sending loop when nothing flows: it does not wake while nothing is
pending, and an event handed in after a quiet spell is still stored on its own (no
flush, no other event behind it to push it out).

The store is a stand-in that accepts every batch (the real stores are under
tests/session).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from services.edge.backends.session import SessionBackend
from services.edge.sessions.event_log import COMMIT_SECS, EventLog

#: A quiet spell many commit windows long (the old loop woke once per window).
QUIET_SECS = 20 * COMMIT_SECS


class _Store:
    def __init__(self) -> None:
        self.batches = 0
        self.stored = asyncio.Event()

    async def append_events(self, batches: Iterable[Any], *, deadline_secs: float) -> list[str]:
        out = ["" for _ in batches]
        self.batches += 1
        self.stored.set()
        return out


async def test_an_idle_log_does_not_wake_and_still_stores_what_comes() -> None:
    store = _Store()
    log = EventLog(cast(SessionBackend, store), lambda _sid: ("", 0), lambda _sid: None)
    await log.begin("edge-test", interrupt=False)
    try:
        await asyncio.sleep(QUIET_SECS)
        assert log.wakeups == 0, "woke with nothing pending"

        log.action("s", 2, 1, "permission", b'{"answer": null}')
        await asyncio.wait_for(store.stored.wait(), 30)  # sent without a flush
        assert store.batches == 1
        woke = log.wakeups

        await asyncio.sleep(QUIET_SECS)
        assert log.wakeups == woke, "woke again after its batch was stored"
        assert store.batches == 1
    finally:
        await log.close()
