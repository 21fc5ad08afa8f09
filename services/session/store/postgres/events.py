"""The event log on PostgreSQL: a batch of many sessions in one transaction (group commit).

Each session's part is one statement (:data:`_WRITE_PART`: the checks and writes of
:mod:`.event_log` and :mod:`.log_quota`, in SQL), so a batch costs few round trips — in
``acpgate acp`` each waits for a turn of the event loop the relay keeps busy. The session's
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
    INTERRUPT_ORPHANS,
    INTERRUPT_SESSION,
    REFUSED_FENCED,
    REFUSED_NOT_FOUND,
    SELECT_CHUNKS,
    SELECT_LOG_START,
    SELECT_TURN_STATES,
    START_TURN,
    TURN_RUNNING,
    EventChunk,
    EventLogStore,
    LoggedEvent,
    SessionBatch,
    batch_problem,
    chunk_of,
    read_chunks,
    read_pages,
)
from services.session.store.interface import Clock
from services.session.store.log_quota import (
    END_STARTED_TURN,
    quota_refusal,
    unlogged,
)
from services.session.store.postgres.db import Conn
from services.session.store.records import Quota, SessionNotFound
from services.session.store.sql.rows import numbered

__all__ = ["PgEvents"]

T = TypeVar("T")

_START_TURN = numbered(START_TURN)
_END_TURN = numbered(END_TURN)
_SELECT_LOG_START = numbered(SELECT_LOG_START)
_SELECT_CHUNKS = numbered(SELECT_CHUNKS)
_SELECT_TURN_STATES = numbered(SELECT_TURN_STATES)
_INTERRUPT_SESSION = numbered(INTERRUPT_SESSION)
_INTERRUPT_ORPHANS = numbered(INTERRUPT_ORPHANS)

#: A session's part in one statement (parameters: session id, holder — NULL for none —,
#: claim generation, its chunks' columns as arrays, the session and owner quotas, 0 for
#: none). The session row is locked (``FOR UPDATE``) and fenced as
#: :func:`~.event_log.held_by` rules; its owner's total is locked after it when the owner's
#: quota applies (so two hosts' parts cannot both pass it). The chunks not logged yet are
#: written when they fit both quotas (``log_quota``'s checks; a part with none new always
#: passes), their bytes — those really inserted — added to the session's and the owner's
#: totals, and the session's log start marked (``MARK_LOG_START``). No row: no session; else
#: whether it was held, its stored bytes, owner and owner's total as read, the bytes of
#: the chunks found new, and whether they were written.
_WRITE_PART: Final = """
WITH target AS (
    SELECT active_instance_id AS instance, claim_generation AS claim, stored_bytes AS stored,
           owner_session_key AS owner
    FROM sessions WHERE id = $1 FOR UPDATE),
fence AS (
    SELECT target.*, ($2::text IS NULL OR CASE
        WHEN $3::bigint = 0 THEN instance IN ('', $2::text)
        WHEN instance = $2::text THEN $3::bigint <= claim
        ELSE instance = '' AND claim = $3::bigint END) AS held
    FROM target),
owner_row AS (
    SELECT o.stored_bytes FROM owner_usage o, fence
    WHERE o.owner_session_key = fence.owner AND fence.held AND fence.owner <> ''
        AND $13::bigint <> 0
    FOR UPDATE OF o),
new AS (
    SELECT c.* FROM unnest($4::bigint[], $5::bigint[], $6::bigint[], $7::text[],
                           $8::bytea[], $9::bytea[], $10::bigint[], $11::integer[])
        AS c (first_event_id, last_event_id, turn_id, kind, prefix, payload, at, form)
    WHERE NOT EXISTS (SELECT 1 FROM event_chunks e WHERE e.session_id = $1
                      AND e.first_event_id = c.first_event_id)),
adding AS (
    SELECT count(*) AS n, coalesce(sum(length(payload) + length(prefix)), 0)::bigint AS b
    FROM new),
verdict AS (
    SELECT fence.held, fence.stored, fence.owner, adding.b,
           coalesce((SELECT stored_bytes FROM owner_row), 0)::bigint AS owner_total,
           fence.held AND (adding.n = 0 OR (
               ($12::bigint = 0 OR fence.stored + adding.b <= $12::bigint)
               AND ($13::bigint = 0 OR fence.owner = ''
                    OR coalesce((SELECT stored_bytes FROM owner_row), 0) + adding.b
                       <= $13::bigint))) AS ok
    FROM fence, adding),
written AS (
    INSERT INTO event_chunks (session_id, first_event_id, last_event_id, turn_id, kind,
                              prefix, payload, at, form)
    SELECT $1, new.* FROM new, verdict WHERE verdict.ok
    ON CONFLICT (session_id, first_event_id) DO NOTHING
    RETURNING length(payload) + length(prefix) AS b),
session_total AS (
    UPDATE sessions SET stored_bytes = stored_bytes + coalesce((SELECT sum(b) FROM written), 0),
        log_from_turn = CASE WHEN log_from_turn = 0 THEN last_turn + 1 ELSE log_from_turn END
    WHERE id = $1 AND (SELECT ok FROM verdict)
        AND (log_from_turn = 0 OR EXISTS (SELECT 1 FROM written))),
owner_total AS (
    INSERT INTO owner_usage (owner_session_key, stored_bytes)
    SELECT (SELECT owner FROM verdict), sum(b) FROM written HAVING count(*) > 0
    ON CONFLICT (owner_session_key) DO UPDATE
    SET stored_bytes = owner_usage.stored_bytes + excluded.stored_bytes)
SELECT held, stored, owner, owner_total, b, ok FROM verdict"""
_END_STARTED_TURN = numbered(END_STARTED_TURN)


async def _write_part(con: Conn, batch: SessionBatch, quota: Quota | None) -> str:
    """Write ``batch`` (:data:`_WRITE_PART`): "" when written, else why not. A part refused
    for a quota is checked once more: the statement's snapshot precedes its lock, so a
    part of the same events committed meanwhile (a batch sent again while the first try
    still ran) counted as new."""
    chunks = unlogged(batch.rows(), ())  # each first event id once
    args = (batch.session_id, batch.holder, batch.generation,
            [c.first for c in chunks], [c.last for c in chunks], [c.turn_id for c in chunks],
            [c.kind for c in chunks], [c.prefix for c in chunks], [c.payload for c in chunks],
            [c.at for c in chunks], [c.form for c in chunks],
            quota.session_bytes if quota is not None else 0,
            quota.owner_bytes if quota is not None else 0)
    for _ in range(2):
        row = await con.fetchrow(_WRITE_PART, *args)
        if row is None:
            return REFUSED_NOT_FOUND
        held, stored, owner, owner_total, adding, written = row
        if not held:
            return REFUSED_FENCED
        if written:
            return ""
    # The statement's checks are log_quota's: the same numbers give its sentence.
    return quota_refusal(int(stored), int(adding), str(owner), int(owner_total),
                         quota) or REFUSED_QUOTA


async def _mark_turns(con: Conn, batch: SessionBatch, refused: str) -> None:
    """``batch``'s turn marks after its part was written (``refused`` ""), or only its turn
    ends of turns already started after it was refused for a quota (they add no bytes)."""
    sid = batch.session_id
    if refused.startswith(REFUSED_QUOTA):
        for mark in batch.turns:
            if mark.state != TURN_RUNNING:
                await con.execute(_END_STARTED_TURN, mark.state, mark.at, sid, mark.turn_id)
        return
    if refused:
        return
    holder = batch.holder or ""
    for mark in batch.turns:
        if mark.state == TURN_RUNNING:
            await con.execute(_START_TURN, sid, mark.turn_id, holder, mark.at)
        else:
            await con.execute(_END_TURN, sid, mark.turn_id, mark.state, holder, mark.at,
                              mark.at)


class PgEvents(EventLogStore):
    """The event log half of :class:`~.pg_store.PostgresSessionStore`."""

    _clock: Clock

    if TYPE_CHECKING:  # PostgresHistory's, on the same pool
        async def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

        async def _transaction(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
        """Write ``batches`` in one transaction (:class:`~.event_log.EventLogStore`): each
        session's part in one statement (:data:`_WRITE_PART`), then its turn marks. A
        batch of one part without marks is that statement alone, its own transaction."""
        problems = [batch_problem(batch) for batch in batches]

        async def append(con: Conn) -> list[str]:
            refused = list(problems)
            for index, batch in enumerate(batches):
                if not refused[index]:
                    refused[index] = await _write_part(con, batch, quota)
                    await _mark_turns(con, batch, refused[index])
            return refused

        if all(problems):
            return problems
        if len(batches) == 1 and not batches[0].turns:
            return await self._call(append)  # may run twice: a part sent again is skipped
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
