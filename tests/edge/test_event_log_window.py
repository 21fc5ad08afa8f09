"""The event log keeps what a crash can lose to about ``COMMIT_SECS`` of what the clients
got, whatever the store's commit takes: the wait between two batches is ``COMMIT_SECS``
less the time recent commits took (never less than ``MIN_WAIT_SECS``).

The store here is a stand-in (the log's own arithmetic is under test; the real stores'
rows are in tests/session and the crash benchmark in ``make bench``). Its commits sleep,
and a sleep is never shorter than asked, so the bounds below cannot be missed by a slow
machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from services.edge.backends.session import SessionBackend
from services.edge.sessions.event_log import COMMIT_SECS, MIN_WAIT_SECS, EventLog

#: How long the stand-in store takes to commit a batch.
COMMIT_TAKES = 0.03


class _SlowStore:
    """Commits that take :data:`COMMIT_TAKES`; every batch accepted."""

    def __init__(self, takes: float) -> None:
        self.takes = takes
        self.batches = 0

    async def append_events(self, batches: Iterable[Any], *, deadline_secs: float) -> list[str]:
        await asyncio.sleep(self.takes)
        self.batches += 1
        return ["" for _ in batches]


async def _log_through(store: _SlowStore, batches: int) -> EventLog:
    log = EventLog(cast(SessionBackend, store), lambda _sid: ("", 0), lambda _sid: None)
    await log.begin("edge-test", interrupt=False)
    for turn in range(1, batches + 1):
        log.action("s", turn, turn, "prompt", b"{}")
        assert await log.flush(60.0)
    return log


async def test_a_slow_commit_shortens_the_wait_before_the_next_batch() -> None:
    store = _SlowStore(COMMIT_TAKES)
    log = await _log_through(store, 12)
    try:
        # After 12 commits of at least 30 ms the estimate is past 29 ms (1 - 0.75**12 of it).
        assert log.commit_secs >= COMMIT_TAKES * (1 - 0.75 ** 12)
        assert log.wait_secs() <= COMMIT_SECS - COMMIT_TAKES * (1 - 0.75 ** 12)
    finally:
        await log.close()


async def test_a_store_slower_than_the_window_still_gets_a_pause_between_batches() -> None:
    store = _SlowStore(COMMIT_SECS * 2)
    log = await _log_through(store, 6)
    try:
        assert log.wait_secs() == MIN_WAIT_SECS
    finally:
        await log.close()


async def test_a_quick_store_keeps_the_whole_window() -> None:
    log = EventLog(cast(SessionBackend, _SlowStore(0.0)), lambda _sid: ("", 0),
                   lambda _sid: None)
    assert log.wait_secs() == COMMIT_SECS
