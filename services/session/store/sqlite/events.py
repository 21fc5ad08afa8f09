"""The event log on SQLite: a batch of many sessions in one ``BEGIN IMMEDIATE`` (group commit).

The statements are :mod:`.event_log`'s; the write lock is taken before the fences are
read, so a takeover cannot slip between a session's check and the commit.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from functools import partial

import aiosqlite

from services.session.store.event_log import (
    CHUNK_PAGE,
    END_TURN,
    EVENT_PAGE,
    INSERT_CHUNK,
    INTERRUPT_ORPHANS,
    INTERRUPT_SESSION,
    MARK_LOG_START,
    REFUSED_FENCED,
    REFUSED_NOT_FOUND,
    SELECT_CHUNKS,
    SELECT_LOG_START,
    SELECT_LOG_TARGET,
    SELECT_TURN_STATES,
    START_TURN,
    TURN_RUNNING,
    EventChunk,
    EventLogStore,
    LoggedEvent,
    SessionBatch,
    batch_problem,
    chunk_of,
    held_by,
    read_chunks,
    read_pages,
)
from services.session.store.interface import Clock
from services.session.store.log_quota import (
    ADD_SESSION_BYTES,
    END_STARTED_TURN,
    SELECT_LOGGED_IDS,
    SELECT_OWNER_BYTES,
    id_range,
    quota_refusal,
    stored_bytes,
    unlogged,
)
from services.session.store.records import Quota, SessionNotFound
from services.session.store.sql.rows import ADD_OWNER_BYTES
from services.session.store.sqlite.db import in_connection

__all__ = ["SqliteEvents"]


def _append(con: sqlite3.Connection, batches: Sequence[SessionBatch], refused: list[str],
            quota: Quota | None) -> list[str]:
    """The batch's transaction, on the connection's own thread (``refused``: the parts
    already found invalid; the others are filled in)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        for index, batch in enumerate(batches):
            if refused[index]:
                continue
            sid = batch.session_id
            row = con.execute(SELECT_LOG_TARGET, (sid,)).fetchone()
            if row is None:
                refused[index] = REFUSED_NOT_FOUND
                continue
            if not held_by(batch.holder, batch.generation, str(row[0]), int(row[1])):
                refused[index] = REFUSED_FENCED
                continue
            refused[index] = _charge(con, batch, int(row[2]), str(row[3]), quota)
            if refused[index]:  # its turn ends still hold (they add no bytes)
                for mark in batch.turns:
                    if mark.state != TURN_RUNNING:
                        con.execute(END_STARTED_TURN, (mark.state, mark.at, sid, mark.turn_id))
                continue
            holder = batch.holder or ""
            for mark in batch.turns:
                if mark.state == TURN_RUNNING:
                    con.execute(START_TURN, (sid, mark.turn_id, holder, mark.at))
                else:
                    con.execute(END_TURN, (sid, mark.turn_id, mark.state, holder, mark.at,
                                           mark.at))
            if not row[4]:
                con.execute(MARK_LOG_START, (sid,))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return refused


def _charge(con: sqlite3.Connection, batch: SessionBatch, stored: int, owner: str,
            quota: Quota | None) -> str:
    """Write ``batch``'s chunks not yet logged and add their bytes to the session's and its
    owner's totals — or nothing, and why, when they would pass ``quota``."""
    chunks = batch.rows()
    if not chunks:
        return ""
    sid = batch.session_id
    low, high = id_range(chunks)
    chunks = unlogged(chunks, (int(r[0]) for r in con.execute(SELECT_LOGGED_IDS,
                                                              (sid, low, high))))
    if not chunks:
        return ""
    adding = stored_bytes(chunks)
    total = con.execute(SELECT_OWNER_BYTES, (owner,)).fetchone()
    why = quota_refusal(stored, adding, owner, int(total[0]) if total else 0, quota)
    if why:
        return why
    con.executemany(INSERT_CHUNK, [
        (sid, c.first, c.last, c.turn_id, c.kind, c.prefix, c.payload, c.at, c.form)
        for c in chunks])
    con.execute(ADD_SESSION_BYTES, (adding, sid))
    con.execute(ADD_OWNER_BYTES, (owner, adding)).fetchall()
    return ""


class SqliteEvents(EventLogStore):
    """The event log half of :class:`~.sqlite_store.SqliteSessionStore`."""

    _db: aiosqlite.Connection
    _lock: asyncio.Lock
    _clock: Clock

    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
        """Write ``batches`` in one transaction (:class:`~.event_log.EventLogStore`), run
        whole on the connection's thread: one hand-over, not one per statement."""
        refused = [batch_problem(batch) for batch in batches]
        async with self._lock:
            return await in_connection(self._db, _append, batches, refused, quota)

    async def iter_events(self, session_id: str, *, after: int = 0, before: int = 0,
                          page: int = EVENT_PAGE) -> AsyncIterator[list[LoggedEvent]]:
        """The logged events in pages, oldest first (chunks split)."""
        async for events in read_pages(partial(self._chunks, session_id), after, before,
                                       page):
            yield events

    async def iter_chunks(self, session_id: str, *, after: int = 0, before: int = 0
                          ) -> AsyncIterator[list[EventChunk]]:
        """The chunks of the logged events, oldest first (cut to the bounds)."""
        async for chunks in read_chunks(partial(self._chunks, session_id), after, before):
            yield chunks

    async def _chunks(self, session_id: str, low: int, bound: int) -> list[EventChunk]:
        async with self._lock:
            rows = await self._db.execute_fetchall(
                SELECT_CHUNKS, (session_id, session_id, low, low, bound, CHUNK_PAGE))
        return [chunk_of(r) for r in rows]

    async def turn_states(self, session_id: str) -> dict[int, str]:
        """Every logged turn's state."""
        async with self._lock:
            rows = await self._db.execute_fetchall(SELECT_TURN_STATES, (session_id,))
        return {int(r[0]): str(r[1]) for r in rows}

    async def log_start(self, session_id: str) -> int:
        """The first history turn the log covers."""
        async with self._lock:
            rows = list(await self._db.execute_fetchall(SELECT_LOG_START, (session_id,)))
        if not rows:
            raise SessionNotFound(session_id)
        return int(rows[0][0])

    async def interrupt_turns(self, *, instance_id: str = "", session_id: str = "") -> int:
        """Running turns nobody will end → interrupted."""
        now = self._clock()
        async with self._lock:
            if session_id:
                cur = await self._db.execute(INTERRUPT_SESSION, (now, session_id))
            else:
                cur = await self._db.execute(INTERRUPT_ORPHANS, (now, instance_id, now))
            return max(0, cur.rowcount)
