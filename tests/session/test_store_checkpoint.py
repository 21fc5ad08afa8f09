"""The SQLite store's WAL is checkpointed in the background, never inside a writer's commit:
the writing connection has SQLite's automatic checkpoint off, a thread of its own copies the
WAL back while writes go on (so the file is reused, not grown), truncates it once writes
stop, and stops with the store — a close while a checkpoint runs waits for it and leaves
the database whole."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services.session.store import NewSession, open_store
from services.session.store.interface import wall_clock_ms
from services.session.store.records import StoreStatusInfo
from services.session.store.sqlite.checkpoint import (
    PASSIVE,
    TRIGGER_BYTES,
    WRITER_PRAGMAS,
    Checkpointer,
)
from services.session.store.sqlite.db import connect, prepare_file
from services.session.store.sqlite.schema import migrate
from services.session.store.sqlite.store import SqliteSessionStore

#: A row of filler: the WAL grows by about this much per insert.
ROW_BYTES = 64 << 10
#: Long enough for any wait in this file on a loaded machine; a bound, not a measurement.
PATIENCE_SECS = 60.0


async def _store(path: Path, cp_class: type[Checkpointer] = Checkpointer,
                 **settings: float) -> SqliteSessionStore:
    """The store on ``path`` with a checkpointer of ``settings`` (as ``open_store`` makes
    it, with other thresholds), and a filler table to grow the WAL with."""
    await asyncio.to_thread(prepare_file, path)
    db = await connect(str(path))
    version = await migrate(db, wall_clock_ms())
    await db.execute("CREATE TABLE IF NOT EXISTS filler (id INTEGER PRIMARY KEY, b BLOB)")
    cp = await cp_class.start(path, **settings)  # type: ignore[arg-type]
    for pragma in WRITER_PRAGMAS:
        await db.execute(pragma)
    return SqliteSessionStore(db, StoreStatusInfo(True, str(path), "", version), wall_clock_ms,
                              cp)


async def _fill(store: SqliteSessionStore, rows: int) -> None:
    for _ in range(rows):
        await store._db.execute("INSERT INTO filler (b) VALUES (randomblob(?))", (ROW_BYTES,))


async def _until(what: Callable[[], bool]) -> None:
    """Wait for ``what`` to hold (the checkpointer's thread works on its own time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE_SECS
    while not what():
        assert loop.time() < deadline, "the checkpointer never got there"
        await asyncio.sleep(0.01)


def _wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _rows(path: Path) -> tuple[str, int]:
    con = sqlite3.connect(path)
    try:
        check = con.execute("PRAGMA quick_check").fetchone()[0]
        return check, con.execute("SELECT count(*) FROM filler").fetchone()[0]
    finally:
        con.close()


@pytest.fixture
async def db_path(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "sessions" / "acp-sessions.db"


async def test_open_store_hands_checkpoints_to_the_background(db_path: Path) -> None:
    """The store ``open_store`` opens on a file checkpoints off its writing connection; the
    memory fallback has nothing to checkpoint."""
    store = await open_store(db_path)
    assert isinstance(store, SqliteSessionStore) and store.checkpointer is not None
    async with store._db.execute("PRAGMA wal_autocheckpoint") as cur:
        assert await cur.fetchone() == (0,)
    await store.create_session(NewSession("s1", "a", "/w"))
    await store.close()
    memory = await open_store(None)
    assert isinstance(memory, SqliteSessionStore) and memory.checkpointer is None
    await memory.close()


async def test_wal_is_checkpointed_while_writes_go_on_and_reused(db_path: Path) -> None:
    """Writes of 20 times the trigger: each burst is copied back by a PASSIVE checkpoint
    while the store stays open, and the writer starts the WAL over instead of growing it
    by everything written."""
    store = await _store(db_path, trigger_bytes=ROW_BYTES * 4, interval=0.05, idle=3600)
    cp = store.checkpointer
    assert cp is not None
    bursts, rows = 20, 8
    largest = 0
    for _ in range(bursts):
        await _fill(store, rows)
        largest = max(largest, _wal_bytes(db_path))
        await _until(cp.caught_up)
    written = bursts * rows * ROW_BYTES
    assert cp.counts.truncate == 0 and cp.counts.passive >= bursts
    assert largest < written // 4
    await store.close()
    assert await asyncio.to_thread(_rows, db_path) == ("ok", bursts * rows)


async def _write_past_the_cap(store: SqliteSessionStore, db_path: Path) -> int:
    """Write with no pause a checkpoint could use, more than the WAL's size limit holds,
    until the WAL file is under that limit: started over and cut back at least once (the
    yield after each commit only lets the checkpointer's thread have its share); the
    rows written."""
    limit = TRIGGER_BYTES + 16 * ROW_BYTES  # the writer's journal_size_limit, and a bit
    written = largest = 0
    while written * ROW_BYTES <= 2 * limit or _wal_bytes(db_path) > limit:
        await _fill(store, 1)
        await asyncio.sleep(0.001)
        written += 1
        largest = max(largest, _wal_bytes(db_path))
        assert written < 3_000, f"the WAL grew to {largest} bytes and was never cut back"
    return written


async def test_writes_that_never_pause_still_get_the_wal_started_over(db_path: Path) -> None:
    """A writer that does not pause finds the WAL rarely or never wholly copied back, so it
    does not start it over by itself: past the cap the checkpointer RESTARTs it, and the
    writer's next commits cut the file back instead of growing it by everything written."""
    store = await _store(db_path, trigger_bytes=ROW_BYTES * 4, interval=0.05, idle=3600,
                         cap_bytes=TRIGGER_BYTES * 2)
    written = await _write_past_the_cap(store, db_path)
    await store.close()
    assert await asyncio.to_thread(_rows, db_path) == ("ok", written)


async def test_busy_readers_do_not_make_the_wal_grow_without_bound(db_path: Path) -> None:
    """Readers in other connections reading all the time, beside a writer that never
    pauses: the RESTART past the cap waits out the snapshots they hold, and the WAL stays
    bounded and is cut back."""
    store = await _store(db_path, trigger_bytes=ROW_BYTES * 4, interval=0.05, idle=3600,
                         cap_bytes=TRIGGER_BYTES * 2)
    stop = threading.Event()
    reads = [0, 0]

    def reader(slot: int) -> None:
        con = sqlite3.connect(db_path, isolation_level=None)
        try:
            while not stop.is_set():
                con.execute("BEGIN")
                con.execute("SELECT count(*) FROM filler").fetchone()
                con.execute("COMMIT")
                reads[slot] += 1
        finally:
            con.close()

    readers = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    try:
        written = await _write_past_the_cap(store, db_path)
    finally:
        stop.set()
        for t in readers:
            await asyncio.to_thread(t.join)
    assert min(reads) > 0
    await store.close()
    assert await asyncio.to_thread(_rows, db_path) == ("ok", written)


async def test_an_idle_wal_is_truncated_and_writes_go_on_after(db_path: Path) -> None:
    """Once writes stop for the idle spell, the WAL file is cut to zero bytes; writes after
    that append to it again."""
    store = await _store(db_path, trigger_bytes=ROW_BYTES * 4, interval=0.05, idle=0.2)
    cp = store.checkpointer
    assert cp is not None
    await _fill(store, 10)
    await _until(lambda: cp.counts.truncate > 0 and _wal_bytes(db_path) == 0)
    await _fill(store, 3)
    assert _wal_bytes(db_path) > 0
    await store.close()
    assert await asyncio.to_thread(_rows, db_path) == ("ok", 13)


async def test_close_stops_the_checkpointer_cleanly(db_path: Path) -> None:
    """Closing the store ends the thread and its connection; closing again does nothing."""
    store = await _store(db_path, interval=0.05, idle=0.1)
    cp = store.checkpointer
    assert cp is not None
    await _fill(store, 5)
    await store.close()
    assert not cp._thread.is_alive()
    assert cp._con is None  # its connection is closed
    await store.close()
    await cp.stop()
    # Last connection closed: SQLite checkpointed the rest and removed the WAL.
    assert _wal_bytes(db_path) == 0
    assert await asyncio.to_thread(_rows, db_path) == ("ok", 5)


class _HeldCheckpointer(Checkpointer):
    """A checkpointer whose PASSIVE checkpoints wait for the test before they run."""

    entered = threading.Event()
    release = threading.Event()

    def _checkpoint(self, mode: str, wait_ms: int = 0) -> bool:
        if mode == PASSIVE:
            self.entered.set()
            assert self.release.wait(PATIENCE_SECS)
        return super()._checkpoint(mode, wait_ms)


async def test_a_store_closed_mid_checkpoint_waits_for_it_and_is_intact(db_path: Path) -> None:
    """A close that comes while a checkpoint is under way waits for it (the checkpointer's
    connection is never pulled from under it), then closes; the file reopens whole."""
    _HeldCheckpointer.entered.clear()
    _HeldCheckpointer.release.clear()
    store = await _store(db_path, _HeldCheckpointer, trigger_bytes=ROW_BYTES, interval=0.05,
                         idle=3600)
    await _fill(store, 40)
    assert await asyncio.to_thread(_HeldCheckpointer.entered.wait, PATIENCE_SECS)
    closing = asyncio.create_task(store.close())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not closing.done()  # the thread is held inside its checkpoint
    _HeldCheckpointer.release.set()
    await closing
    assert await asyncio.to_thread(_rows, db_path) == ("ok", 40)
    reopened = await open_store(db_path)
    await reopened.create_session(NewSession("s1", "a", "/w"))
    await reopened.close()


class _FailsOnce(Checkpointer):
    """A checkpointer whose first checkpoint fails unexpectedly (a bug, a broken handle)."""

    failed_once = False

    def _checkpoint(self, mode: str, wait_ms: int = 0) -> bool:
        if not self.failed_once:
            self.failed_once = True
            raise RuntimeError("unexpected")
        return super()._checkpoint(mode, wait_ms)


async def test_a_failure_in_the_thread_does_not_end_the_checkpoints(db_path: Path) -> None:
    """The writer never checkpoints itself, so the thread goes on after an unexpected
    failure (logged) with a fresh connection: the WAL is still copied back."""
    store = await _store(db_path, _FailsOnce, trigger_bytes=ROW_BYTES * 4, interval=0.05,
                         idle=3600)
    cp = store.checkpointer
    assert isinstance(cp, _FailsOnce)
    await _fill(store, 8)
    await _until(lambda: cp.failures == 1)
    await _fill(store, 8)
    await _until(cp.caught_up)
    assert cp.counts.passive >= 1 and cp._thread.is_alive()
    await store.close()
    assert not cp._thread.is_alive()
    assert await asyncio.to_thread(_rows, db_path) == ("ok", 16)


async def test_a_quiet_wal_is_looked_at_once_an_interval_and_writes_still_wake_it(
        db_path: Path) -> None:
    """With nothing written the thread looks at the WAL once an interval, not every
    poll; a write after the quiet spell still gets its checkpoint and, once writes stop
    again, its truncate."""
    interval = 0.5
    store = await _store(db_path, interval=interval, idle=1.0)
    cp = store.checkpointer
    assert cp is not None
    try:
        await _fill(store, 2)
        await _until(lambda: cp.counts.truncate > 0 and _wal_bytes(db_path) == 0)
        await asyncio.sleep(2 * interval)  # quiet from here on
        quiet_secs = 8 * interval
        looks = cp.looks
        await asyncio.sleep(quiet_secs)
        assert cp.looks - looks <= quiet_secs / interval + 2, "looked every poll while quiet"

        passive, truncate = cp.counts.passive, cp.counts.truncate
        await _fill(store, 3)
        await _until(lambda: cp.counts.passive > passive)
        await _until(lambda: cp.counts.truncate > truncate and _wal_bytes(db_path) == 0)
    finally:
        await store.close()
    assert await asyncio.to_thread(_rows, db_path) == ("ok", 5)
