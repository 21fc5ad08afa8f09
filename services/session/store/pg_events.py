"""The event log on PostgreSQL: a batch of many sessions in one transaction (group commit).

The statements are :mod:`.event_log`'s with numbered placeholders; each session's
row is locked (``FOR UPDATE``) before its fence is read, so a takeover waits for the
batch's commit or is seen by it. Appends skip events already there, so a batch sent
again after a lost answer writes nothing twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

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
    read_pages,
)
from services.session.store.interface import Clock
from services.session.store.pg_db import Conn
from services.session.store.records import SessionNotFound
from services.session.store.sql_rows import numbered

__all__ = ["PgEvents"]

T = TypeVar("T")

_SELECT_LOG_TARGET = numbered(SELECT_LOG_TARGET) + " FOR UPDATE"
_INSERT_CHUNK = numbered(INSERT_CHUNK)
_START_TURN = numbered(START_TURN)
_END_TURN = numbered(END_TURN)
_MARK_LOG_START = numbered(MARK_LOG_START)
_SELECT_LOG_START = numbered(SELECT_LOG_START)
_SELECT_CHUNKS = numbered(SELECT_CHUNKS)
_SELECT_TURN_STATES = numbered(SELECT_TURN_STATES)
_INTERRUPT_SESSION = numbered(INTERRUPT_SESSION)
_INTERRUPT_ORPHANS = numbered(INTERRUPT_ORPHANS)


class PgEvents(EventLogStore):
    """The event log half of :class:`~.pg_store.PostgresSessionStore`."""

    _clock: Clock

    if TYPE_CHECKING:  # PostgresHistory's, on the same pool
        async def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

        async def _transaction(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def append_events(self, batches: Sequence[SessionBatch]) -> list[str]:
        """Write ``batches`` in one transaction (:class:`~.event_log.EventLogStore`)."""
        problems = [batch_problem(batch) for batch in batches]

        async def append(con: Conn) -> list[str]:
            refused = list(problems)
            for index, batch in enumerate(batches):
                if refused[index]:
                    continue
                sid = batch.session_id
                row = await con.fetchrow(_SELECT_LOG_TARGET, sid)
                if row is None:
                    refused[index] = REFUSED_NOT_FOUND
                    continue
                if not held_by(batch.holder, batch.generation, str(row[0]), int(row[1])):
                    refused[index] = REFUSED_FENCED
                    continue
                chunks = batch.rows()
                if chunks:
                    await con.executemany(_INSERT_CHUNK, [
                        (sid, c.first, c.last, c.turn_id, c.kind, c.prefix, c.payload, c.at, c.form)
                        for c in chunks])
                holder = batch.holder or ""
                for mark in batch.turns:
                    if mark.state == TURN_RUNNING:
                        await con.execute(_START_TURN, sid, mark.turn_id, holder, mark.at)
                    else:
                        await con.execute(_END_TURN, sid, mark.turn_id, mark.state, holder,
                                          mark.at, mark.at)
                if not row[2]:
                    await con.execute(_MARK_LOG_START, sid)
            return refused

        if all(problems):
            return problems
        return await self._transaction(append)

    async def iter_events(self, session_id: str, *, after: int = 0, before: int = 0,
                          page: int = EVENT_PAGE) -> AsyncIterator[list[LoggedEvent]]:
        """The logged events in pages, oldest first (chunks split; a connection held per
        query only)."""

        async def fetch(low: int, bound: int) -> list[EventChunk]:
            rows = await self._call(lambda con: con.fetch(
                _SELECT_CHUNKS, session_id, session_id, low, low, bound, CHUNK_PAGE))
            return [chunk_of(r) for r in rows]

        async for events in read_pages(fetch, after, before, page):
            yield events

    async def turn_states(self, session_id: str) -> dict[int, str]:
        """Every logged turn's state."""
        rows = await self._call(lambda con: con.fetch(_SELECT_TURN_STATES, session_id))
        return {int(r[0]): str(r[1]) for r in rows}

    async def log_start(self, session_id: str) -> int:
        """The first history turn the log covers."""
        value = await self._call(lambda con: con.fetchval(_SELECT_LOG_START, session_id))
        if value is None:
            raise SessionNotFound(session_id)
        return int(value)

    async def interrupt_turns(self, *, instance_id: str = "", session_id: str = "") -> int:
        """Running turns nobody will end → interrupted."""
        now = self._clock()
        if session_id:
            status = await self._call(
                lambda con: con.execute(_INTERRUPT_SESSION, now, session_id))
        else:
            status = await self._call(
                lambda con: con.execute(_INTERRUPT_ORPHANS, now, instance_id, now))
        return int(str(status).rsplit(" ", 1)[-1] or 0)
