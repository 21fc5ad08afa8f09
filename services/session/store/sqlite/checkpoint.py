"""Checkpointing the SQLite store's WAL in the background, never inside a writer's commit.

SQLite's automatic checkpoint runs in the commit that takes the WAL past its threshold:
that commit (and every event-log batch queued behind it) waits while the whole WAL is
copied into the database file and synced. The store's writing connection turns it off
(:data:`WRITER_PRAGMAS`) and a :class:`Checkpointer` does the work instead, on a thread
and a connection of its own, so nothing of it runs on the event loop or in a commit:

- PASSIVE (it never waits for a lock, so writers and readers go on) when the WAL has
  grown by :attr:`~Checkpointer.trigger_bytes` since the last checkpoint, or every
  :attr:`~Checkpointer.interval` while it changes, with one more quick pass when a
  write came in during it; once all of it is copied back, the next writer starts the
  WAL over from its beginning instead of appending;
- TRUNCATE (the file back to zero bytes) once the WAL has not changed for
  :attr:`~Checkpointer.idle`, without a busy wait: a writer in the way makes it a
  try for the next idle spell;
- while the WAL is quiet (unchanged for an interval, nothing left to copy back) the thread
  looks at it once an interval instead of every :data:`POLL_SECS`;
- RESTART with a short busy wait (writers wait at most that long, for the frames the
  PASSIVE before it left) once the WAL has passed :attr:`~Checkpointer.cap_bytes`:
  a writer starts the WAL over only when it finds all of it copied back, which writes
  that never pause, or readers that overlap one another, can keep from ever happening;
  a reader that holds one snapshot for long still pins the WAL, as it would with
  SQLite's own checkpoints, and is logged.

The caller opens it with :meth:`Checkpointer.start` (which fails, leaving SQLite's
automatic checkpoint as it was, if its connection cannot be opened) and awaits
:meth:`Checkpointer.stop` before closing the writing connection: a checkpoint under way
finishes first (a checkpoint cut short by a crash is safe too: the WAL keeps the frames).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiosqlite

from services.common.logs import get_logger

__all__ = ["WRITER_PRAGMAS", "CheckpointCounts", "Checkpointer", "take_over"]

log = get_logger("session.store")

#: The WAL's size, in bytes, at which a PASSIVE checkpoint runs at once (SQLite's own
#: threshold is 1,000 pages, about 4 MiB).
TRIGGER_BYTES: Final = 4 << 20
#: The longest a changed WAL waits for its PASSIVE checkpoint below the trigger.
INTERVAL_SECS: Final = 0.5
#: How long the WAL must stay unchanged before it is truncated.
IDLE_SECS: Final = 5.0
#: Past this, a RESTART follows the PASSIVE (see the module doc for why PASSIVE alone may
#: never get the WAL started over).
CAP_BYTES: Final = 16 << 20
#: How long a RESTART waits for readers (and holds new writers up) at most.
RESTART_WAIT_MS: Final = 100
#: How often the thread looks at the WAL file (a stat; no lock, no SQL) while it changes;
#: once it is quiet, every :attr:`~Checkpointer.interval`.
POLL_SECS: Final = 0.05
#: After an unexpected failure: how long the thread waits before it opens its connection
#: again and goes on (the writer never checkpoints itself, so the thread must not end).
RETRY_SECS: Final = 1.0
#: The writing connection: no checkpoint in its commits; a WAL the writer starts over
#: is cut back to this size on its next commit, so a burst does not keep its file.
WRITER_PRAGMAS: Final = ("PRAGMA wal_autocheckpoint = 0",
                         f"PRAGMA journal_size_limit = {TRIGGER_BYTES}")

PASSIVE: Final = "PASSIVE"
RESTART: Final = "RESTART"
TRUNCATE: Final = "TRUNCATE"


@dataclass
class CheckpointCounts:
    """What the checkpointer did so far (for tests and measurements)."""

    passive: int = 0
    restart: int = 0
    truncate: int = 0
    #: Checkpoints that could not copy the whole WAL (a reader or writer in the way).
    partial: int = 0
    #: The largest WAL file seen, in bytes.
    max_wal_bytes: int = 0


class Checkpointer:
    """The background checkpoints of one SQLite database file (the module doc)."""

    def __init__(self, db_path: Path, con: sqlite3.Connection, *,
                 trigger_bytes: int = TRIGGER_BYTES, interval: float = INTERVAL_SECS,
                 idle: float = IDLE_SECS, cap_bytes: int = CAP_BYTES) -> None:
        self.trigger_bytes = trigger_bytes
        self.interval = interval
        self.idle = idle
        self.cap_bytes = cap_bytes
        self.counts = CheckpointCounts()
        self._db_path = db_path
        self._wal = Path(f"{db_path}-wal")
        self._con: sqlite3.Connection | None = con
        #: Unexpected failures the thread went on after (each logged).
        self.failures = 0
        #: Times the thread looked at the WAL file (measurements and tests).
        self.looks = 0
        self._at_checkpoint = (-1, -1)  # the WAL file (size, mtime) the last checkpoint saw
        self._done = False  # whether it copied all of it back
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acpgate-wal-checkpoint",
                                        daemon=True)

    @classmethod
    async def start(cls, db_path: Path, *, trigger_bytes: int = TRIGGER_BYTES,
                    interval: float = INTERVAL_SECS, idle: float = IDLE_SECS,
                    cap_bytes: int = CAP_BYTES) -> Checkpointer:
        """Open its connection (off the loop) and start its thread; sqlite3.Error if the
        connection cannot be opened (nothing is left running then)."""
        con = await asyncio.to_thread(_open, db_path)
        cp = cls(db_path, con, trigger_bytes=trigger_bytes, interval=interval, idle=idle,
                 cap_bytes=cap_bytes)
        cp._thread.start()
        return cp

    async def stop(self) -> None:
        """Stop the thread, after the checkpoint it may be running, and close its
        connection; a second call does nothing."""
        self._stopping.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)

    # -- the thread

    def _run(self) -> None:
        try:
            while True:
                try:
                    self._watch()
                    return  # stopped
                except Exception as exc:  # the writer relies on this thread: go on
                    self.failures += 1
                    log.error("wal_checkpointer_failed", error=type(exc).__name__,
                              detail=str(exc), retry_secs=RETRY_SECS)
                if self._stopping.wait(RETRY_SECS):
                    return
                self._reopen()
        finally:
            self._close()

    def _close(self) -> None:
        if self._con is not None:
            with contextlib.suppress(sqlite3.Error):
                self._con.close()
            self._con = None

    def _reopen(self) -> None:
        """A fresh connection after a failure (a failing one is left closed; the next
        checkpoint then fails again and is retried after :data:`RETRY_SECS`)."""
        self._close()
        try:
            self._con = _open(self._db_path)
        except sqlite3.Error as exc:
            log.error("wal_checkpointer_reopen_failed", error=str(exc))

    def caught_up(self) -> bool:
        """Whether the last checkpoint copied the whole WAL back and nothing was written
        since (any thread may ask)."""
        return self._done and self._look() == self._at_checkpoint

    def _watch(self) -> None:
        seen = self._look()
        if not self.failures:  # after a failure, what is there may never have been copied
            self._at_checkpoint = seen
        last_change = last_checkpoint = time.monotonic()
        truncated = seen == (0, 0)
        pinned_warned = False
        pause = POLL_SECS
        while not self._stopping.wait(pause):
            self.looks += 1
            now_seen = self._look()
            now = time.monotonic()
            if now_seen != seen:
                seen, last_change, truncated = now_seen, now, False
            size = seen[0]
            self.counts.max_wal_bytes = max(self.counts.max_wal_bytes, size)
            if truncated or size == 0:
                pass
            elif seen != self._at_checkpoint and (
                    size - self._at_checkpoint[0] >= self.trigger_bytes
                    or now - last_checkpoint >= self.interval):
                before = self._look()
                done = self._checkpoint(PASSIVE)
                if done and self._look() != before:  # a write came in meanwhile: its few
                    before = self._look()            # frames, so it may find all copied
                    done = self._checkpoint(PASSIVE)
                if size >= self.cap_bytes:
                    # PASSIVE alone never got the WAL started over: writes that never
                    # pause (each finds frames not yet copied back) or overlapping readers.
                    done = self._checkpoint(RESTART, RESTART_WAIT_MS)
                    if not done and not pinned_warned:
                        log.warning("wal_pinned_by_reader", wal_bytes=size)
                        pinned_warned = True
                pinned_warned = pinned_warned and not done
                # As the WAL was when the checkpoint began: a later write is the next's.
                self._at_checkpoint, self._done = before, done
                last_checkpoint = time.monotonic()
            elif now - last_change >= self.idle:
                truncated = self._checkpoint(TRUNCATE)
                seen = self._at_checkpoint = self._look()
                self._done = truncated
                last_change = time.monotonic()
            # Quiet (nothing written for an interval, nothing left to copy back): look
            # once an interval, which still starts the first PASSIVE within one interval
            # of a write; while writes go on, every POLL_SECS (the trigger is noticed soon).
            quiet = time.monotonic() - last_change >= self.interval and (
                truncated or seen[0] == 0 or seen == self._at_checkpoint)
            pause = self.interval if quiet else POLL_SECS

    def _look(self) -> tuple[int, int]:
        """The WAL file's size and modification time ((0, 0): no file)."""
        try:
            st = os.stat(self._wal)
        except FileNotFoundError:
            return (0, 0)
        return (st.st_size, st.st_mtime_ns)

    def _checkpoint(self, mode: str, wait_ms: int = 0) -> bool:
        """One checkpoint in ``mode``; whether it copied the whole WAL (and, past PASSIVE,
        got the locks it needs); sqlite3.Error without a connection."""
        con = self._con
        if con is None:
            raise sqlite3.OperationalError("no checkpoint connection")
        con.execute(f"PRAGMA busy_timeout = {wait_ms}")
        row = con.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        busy, frames, copied = (int(x) for x in row)
        done = not busy and frames == copied
        if mode == PASSIVE:
            self.counts.passive += 1
        elif mode == RESTART:
            self.counts.restart += 1
        else:
            self.counts.truncate += 1
        self.counts.partial += 0 if done else 1
        return done


def _open(db_path: Path) -> sqlite3.Connection:
    """The checkpointer's connection: autocommit, used only by its thread."""
    con = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    try:
        for pragma in WRITER_PRAGMAS:
            con.execute(pragma)
    except sqlite3.Error:
        con.close()
        raise
    return con


async def take_over(db: aiosqlite.Connection, db_path: Path) -> Checkpointer | None:
    """Start a :class:`Checkpointer` on ``db_path`` and turn the automatic checkpoint of
    ``db`` (its writing connection) off; None, with SQLite's checkpoint left on, if the
    checkpointer cannot open its connection."""
    try:
        cp = await Checkpointer.start(db_path)
    except sqlite3.Error as exc:
        log.warning("wal_checkpointer_unavailable", db_path=str(db_path), error=str(exc))
        return None
    try:
        for pragma in WRITER_PRAGMAS:
            await db.execute(pragma)
    except BaseException:
        await cp.stop()
        raise
    return cp
