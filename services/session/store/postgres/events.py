"""The event log on PostgreSQL: a batch of many sessions in one transaction (group commit).

The statements are :mod:`.event_log`'s with numbered placeholders; each session's
row is locked (``FOR UPDATE``) before its fence is read, so a takeover waits for the
batch's commit or is seen by it. Appends skip events already there, so a batch sent
again after a lost answer writes nothing twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final, TypeVar

from services.common.protocol import REFUSED_QUOTA
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
    END_STARTED_TURN,
    SELECT_OWNER_BYTES,
    quota_refusal,
    unlogged,
)
from services.session.store.postgres.db import Conn
from services.session.store.records import Quota, SessionNotFound
from services.session.store.sql.rows import numbered

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

#: The owner's total, locked as ``ADD_OWNER_BYTES`` would lock it (after the session row,
#: as a turn does), so two hosts' batches of one owner cannot both pass its quota.
_SELECT_OWNER_BYTES = numbered(SELECT_OWNER_BYTES) + " FOR UPDATE"
#: A session's part written in one round trip (the session row locked and fenced first):
#: of its chunks (parameters 2–9: their columns as arrays) those not logged yet, if their
#: bytes fit the session quota (10: 0 = none; 11: the session's stored bytes) and the
#: owner's (12: 0 = none applies; 13: the owner's locked total), are inserted and added to
#: the session's and the owner's (14) totals. Answers the bytes of those not logged and
#: whether they were written — none is new, or all fit (the checks of ``log_quota``).
_WRITE_CHUNKS: Final = """
WITH new AS (
    SELECT c.* FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
                           $6::bytea[], $7::bytea[], $8::bigint[], $9::integer[])
        AS c (first_event_id, last_event_id, turn_id, kind, prefix, payload, at, form)
    WHERE NOT EXISTS (SELECT 1 FROM event_chunks e WHERE e.session_id = $1
                      AND e.first_event_id = c.first_event_id)),
verdict AS (
    SELECT b, n = 0 OR (($10::bigint = 0 OR $11::bigint + b <= $10::bigint)
                        AND ($12::bigint = 0 OR $13::bigint + b <= $12::bigint)) AS ok
    FROM (SELECT count(*) AS n,
                 coalesce(sum(length(payload) + length(prefix)), 0)::bigint AS b
          FROM new) AS adding),
written AS (
    INSERT INTO event_chunks (session_id, first_event_id, last_event_id, turn_id, kind,
                              prefix, payload, at, form)
    SELECT $1, new.* FROM new, verdict WHERE verdict.ok
    ON CONFLICT (session_id, first_event_id) DO NOTHING
    RETURNING length(payload) + length(prefix) AS b),
session_total AS (
    UPDATE sessions SET stored_bytes = stored_bytes + (SELECT sum(b) FROM written)
    WHERE id = $1 AND EXISTS (SELECT 1 FROM written)),
owner_total AS (
    INSERT INTO owner_usage (owner_session_key, stored_bytes)
    SELECT $14, sum(b) FROM written HAVING count(*) > 0
    ON CONFLICT (owner_session_key) DO UPDATE
    SET stored_bytes = owner_usage.stored_bytes + excluded.stored_bytes)
SELECT b, ok FROM verdict"""
_END_STARTED_TURN = numbered(END_STARTED_TURN)


def _owner_limit(owner: str, quota: Quota | None) -> int:
    """The owner quota a part of ``owner``'s is checked against (0: none applies, as
    ``check_owner_quota`` rules)."""
    return quota.owner_bytes if quota is not None and owner else 0


async def _charge(con: Conn, batch: SessionBatch, stored: int, owner: str,
                  quota: Quota | None) -> str:
    """Write ``batch``'s chunks not yet logged and add their bytes to the session's and its
    owner's totals — or nothing, and why, when they would pass ``quota``: one statement
    (:data:`_WRITE_CHUNKS`), and the owner's total read first only when its quota applies."""
    chunks = unlogged(batch.rows(), ())  # each first event id once
    if not chunks:
        return ""
    owner_limit = _owner_limit(owner, quota)
    total = int(await con.fetchval(_SELECT_OWNER_BYTES, owner) or 0) if owner_limit else 0
    row = await con.fetchrow(
        _WRITE_CHUNKS, batch.session_id, [c.first for c in chunks], [c.last for c in chunks],
        [c.turn_id for c in chunks], [c.kind for c in chunks], [c.prefix for c in chunks],
        [c.payload for c in chunks], [c.at for c in chunks], [c.form for c in chunks],
        quota.session_bytes if quota is not None else 0, stored, owner_limit, total, owner)
    assert row is not None  # an aggregate: always one row
    if row[1]:
        return ""
    # The statement's checks are log_quota's: the same numbers give its sentence.
    return quota_refusal(stored, int(row[0]), owner, total, quota) or REFUSED_QUOTA


class PgEvents(EventLogStore):
    """The event log half of :class:`~.pg_store.PostgresSessionStore`."""

    _clock: Clock

    if TYPE_CHECKING:  # PostgresHistory's, on the same pool
        async def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

        async def _transaction(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
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
                refused[index] = await _charge(con, batch, int(row[2]), str(row[3]), quota)
                if refused[index]:
                    for mark in batch.turns:
                        if mark.state != TURN_RUNNING:
                            await con.execute(_END_STARTED_TURN, mark.state, mark.at, sid,
                                              mark.turn_id)
                    continue
                holder = batch.holder or ""
                for mark in batch.turns:
                    if mark.state == TURN_RUNNING:
                        await con.execute(_START_TURN, sid, mark.turn_id, holder, mark.at)
                    else:
                        await con.execute(_END_TURN, sid, mark.turn_id, mark.state, holder,
                                          mark.at, mark.at)
                if not row[4]:
                    await con.execute(_MARK_LOG_START, sid)
            return refused

        if all(problems):
            return problems
        return await self._transaction(append)

    async def iter_events(self, session_id: str, *, after: int = 0, before: int = 0,
                          page: int = EVENT_PAGE) -> AsyncIterator[list[LoggedEvent]]:
        """The logged events in pages, oldest first (chunks split; a connection held per
        query only)."""
        async for events in read_pages(partial(self._chunks, session_id), after, before,
                                       page):
            yield events

    async def iter_chunks(self, session_id: str, *, after: int = 0, before: int = 0
                          ) -> AsyncIterator[list[EventChunk]]:
        """The chunks of the logged events, oldest first (cut to the bounds)."""
        async for chunks in read_chunks(partial(self._chunks, session_id), after, before):
            yield chunks

    async def _chunks(self, session_id: str, low: int, bound: int) -> list[EventChunk]:
        rows = await self._call(lambda con: con.fetch(
            _SELECT_CHUNKS, session_id, session_id, low, low, bound, CHUNK_PAGE))
        return [chunk_of(r) for r in rows]

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
