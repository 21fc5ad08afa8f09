"""``EventLog.settled``, which a relayed answer awaits before the agent gets it: True once
what was handed in is stored, False while the store does not answer (the caller waits on),
and True at once where nothing would ever store it (the log not sending, the session's log
lost), so an answer is never held back for good by a log that is not there.

The store is a stand-in whose commit waits until the test lets it through (the real stores
are under tests/session, the whole path in tests/chaos/test_edge_worker_questions.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from services.edge.backends.session import SessionBackend
from services.edge.sessions.event_log import EventLog


class _GatedStore:
    """Commits that wait for :attr:`gate`; every batch accepted."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.stored = 0

    async def append_events(self, batches: Iterable[Any], *, deadline_secs: float) -> list[str]:
        await self.gate.wait()
        out = ["" for _ in batches]
        self.stored += len(out)
        return out


def _log(store: _GatedStore, max_pending: int = 1 << 20) -> EventLog:
    return EventLog(cast(SessionBackend, store), lambda _sid: ("", 0), lambda _sid: None,
                    max_pending=max_pending)


async def test_an_answer_settles_only_once_it_is_stored() -> None:
    store = _GatedStore()
    log = _log(store)
    await log.begin("edge-test", interrupt=False)
    try:
        log.action("s", 2, 1, "permission", b'{"answer": null}')
        assert not await log.settled("s", 0.2), "not stored yet"
        store.gate.set()
        assert await log.settled("s", 60.0)
        assert store.stored == 1
    finally:
        await log.close()


async def test_a_log_that_stores_nothing_holds_nothing_back() -> None:
    store = _GatedStore()
    idle = _log(store)  # never begun: nothing is sent
    idle.action("s", 2, 1, "permission", b"{}")
    assert await idle.settled("s", 60.0)

    lost = _log(store, max_pending=8)
    await lost.begin("edge-test", interrupt=False)
    try:
        lost.action("s", 2, 1, "permission", b'{"answer": "longer than eight bytes"}')
        assert "s" in lost.lost
        assert await lost.settled("s", 60.0)
    finally:
        store.gate.set()
        await lost.close(0.1)  # its lost events never count as stored
