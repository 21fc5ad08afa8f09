"""The event log on SQLite: a batch of many sessions in one ``BEGIN IMMEDIATE`` (group commit).

The statements are :mod:`.event_log`'s; the write lock is taken before the fences are
read, so a takeover cannot slip between a session's check and the commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import aiosqlite

from services.session.store.event_log import (
    END_TURN,
    EVENT_PAGE,
    INSERT_EVENT,
    INTERRUPT_ORPHANS,
    INTERRUPT_SESSION,
    MARK_LOG_START,
    NO_BOUND,
    REFUSED_FENCED,
    REFUSED_NOT_FOUND,
    SELECT_EVENTS,
    SELECT_LOG_START,
    SELECT_LOG_TARGET,
    SELECT_TURN_STATES,
    START_TURN,
    TURN_RUNNING,
    EventLogStore,
    LoggedEvent,
    SessionBatch,
    batch_problem,
    held_by,
)
from services.session.store.interface import Clock
from services.session.store.log_quota import (
    ADD_SESSION_BYTES,
    END_STARTED_TURN,
    SELECT_LOGGED_IDS,
    SELECT_OWNER_BYTES,
    id_range,
    quota_refusal,
    unlogged,
)
from services.session.store.records import Quota, SessionNotFound
from services.session.store.sql_rows import ADD_OWNER_BYTES
from services.session.store.sqlite_db import immediate

__all__ = ["SqliteEvents"]


class SqliteEvents(EventLogStore):
    """The event log half of :class:`~.sqlite_store.SqliteSessionStore`."""

    _db: aiosqlite.Connection
    _lock: asyncio.Lock
    _clock: Clock

    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
        """Write ``batches`` in one transaction (:class:`~.event_log.EventLogStore`)."""
        refused = [batch_problem(batch) for batch in batches]
        db = self._db
        async with self._lock, immediate(db):
            for index, batch in enumerate(batches):
                if refused[index]:
                    continue
                sid = batch.session_id
                rows = list(await db.execute_fetchall(SELECT_LOG_TARGET, (sid,)))
                if not rows:
                    refused[index] = REFUSED_NOT_FOUND
                    continue
                target = rows[0]
                if not held_by(batch.holder, batch.generation, str(target[0]), int(target[1])):
                    refused[index] = REFUSED_FENCED
                    continue
                refused[index] = await self._charge(batch, int(target[2]), str(target[3]), quota)
                if refused[index]:
                    for mark in batch.turns:
                        if mark.state != TURN_RUNNING:
                            await db.execute(END_STARTED_TURN,
                                             (mark.state, mark.at, sid, mark.turn_id))
                    continue
                holder = batch.holder or ""
                for mark in batch.turns:
                    if mark.state == TURN_RUNNING:
                        await db.execute(START_TURN, (sid, mark.turn_id, holder, mark.at))
                    else:
                        await db.execute(END_TURN, (sid, mark.turn_id, mark.state, holder,
                                                    mark.at, mark.at))
                await db.execute(MARK_LOG_START, (sid,))
        return refused

    async def _charge(self, batch: SessionBatch, stored: int, owner: str,
                      quota: Quota | None) -> str:
        """Write ``batch``'s events not yet logged and add their bytes to the session's and
        its owner's totals — or nothing, and why, when they would pass ``quota``."""
        if not batch.events:
            return ""
        db, sid = self._db, batch.session_id
        low, high = id_range(batch.events)
        logged = await db.execute_fetchall(SELECT_LOGGED_IDS, (sid, low, high))
        events = unlogged(batch.events, (int(r[0]) for r in logged))
        adding = sum(len(e.payload) for e in events)
        if not adding:
            return ""
        totals = list(await db.execute_fetchall(SELECT_OWNER_BYTES, (owner,)))
        why = quota_refusal(stored, adding, owner, int(totals[0][0]) if totals else 0, quota)
        if why:
            return why
        await db.executemany(INSERT_EVENT, [
            (sid, e.event_id, e.turn_id, e.kind, e.payload, e.at) for e in events])
        await db.execute(ADD_SESSION_BYTES, (adding, sid))
        await db.execute_fetchall(ADD_OWNER_BYTES, (owner, adding))
        return ""

    async def iter_events(self, session_id: str, *, after: int = 0, before: int = 0,
                          page: int = EVENT_PAGE) -> AsyncIterator[list[LoggedEvent]]:
        """The logged events in pages, oldest first."""
        bound = before or NO_BOUND
        while True:
            async with self._lock:
                rows = list(await self._db.execute_fetchall(
                    SELECT_EVENTS, (session_id, after, bound, page)))
            if not rows:
                return
            events = [LoggedEvent(int(r[0]), int(r[1]), str(r[2]), bytes(r[3]), int(r[4]))
                      for r in rows]
            yield events
            if len(rows) < page:
                return
            after = events[-1].event_id

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
