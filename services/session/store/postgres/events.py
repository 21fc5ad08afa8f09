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
from typing import TYPE_CHECKING, Any, Final, TypeVar

from services.common.protocol import REFUSED_QUOTA
from services.session.store.event_log import (
    CHUNK_PAGE,
    EVENT_PAGE,
    INTERRUPT_ORPHANS,
    INTERRUPT_SESSION,
    REFUSED_FENCED,
    REFUSED_NOT_FOUND,
    SELECT_CHUNKS,
    SELECT_LOG_START,
    SELECT_TURN_STATES,
    TURN_RUNNING,
    EventChunk,
    EventLogStore,
    LoggedEvent,
    SessionBatch,
    TurnMark,
    batch_problem,
    chunk_of,
    read_chunks,
    read_pages,
)
from services.session.store.interface import Clock
from services.session.store.log_quota import (
    quota_refusal,
    unlogged,
)
from services.session.store.postgres.db import Conn
from services.session.store.records import Quota, SessionNotFound
from services.session.store.sql.rows import numbered

__all__ = ["PgEvents"]

T = TypeVar("T")

_SELECT_LOG_START = numbered(SELECT_LOG_START)
_SELECT_CHUNKS = numbered(SELECT_CHUNKS)
_SELECT_TURN_STATES = numbered(SELECT_TURN_STATES)
_INTERRUPT_SESSION = numbered(INTERRUPT_SESSION)
_INTERRUPT_ORPHANS = numbered(INTERRUPT_ORPHANS)

#: A session's part in one statement (parameters: session id, holder — NULL for none —,
#: claim generation, its chunks' columns as arrays, the session and owner quotas, 0 for
#: none, its turn marks as arrays — one row per turn, :func:`_turn_rows` —, and whether a
#: refused part's turn ends apply). The session row is locked (``FOR UPDATE``) and fenced as
#: :func:`~.event_log.held_by` rules; its owner's total is locked after it when the owner's
#: quota applies (so two hosts' parts cannot both pass it). The chunks not logged yet are
#: written when they fit both quotas (``log_quota``'s checks; a part with none new always
#: passes), their bytes — those really inserted — added to the session's and the owner's
#: totals, and the session's log start marked (``MARK_LOG_START``). A written part's turns
#: start and end as ``START_TURN`` then ``END_TURN`` rule (a final state is kept); a part
#: refused for a quota only ends turns already running (``END_STARTED_TURN``: they add no
#: bytes). No row: no session; else whether it was held, its stored bytes, owner and
#: owner's total as read, the bytes of the chunks found new, and whether they were written.
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
    SET stored_bytes = owner_usage.stored_bytes + excluded.stored_bytes),
marks AS (
    SELECT m.* FROM unnest($14::bigint[], $15::text[], $16::bigint[], $17::bigint[])
        AS m (turn_id, state, started_at, ended_at)),
marked AS (
    INSERT INTO turns (session_id, turn_id, state, instance_id, started_at, ended_at)
    SELECT $1, marks.turn_id, marks.state, coalesce($2::text, ''), marks.started_at,
           marks.ended_at
    FROM marks, verdict WHERE verdict.ok
    ON CONFLICT (session_id, turn_id) DO UPDATE
    SET state = excluded.state, ended_at = excluded.ended_at
    WHERE turns.state = 'running' AND excluded.state <> 'running'),
refused_ends AS (
    UPDATE turns SET state = marks.state, ended_at = marks.ended_at
    FROM marks, verdict
    WHERE $18::boolean AND verdict.held AND NOT verdict.ok AND marks.state <> 'running'
        AND turns.session_id = $1 AND turns.turn_id = marks.turn_id
        AND turns.state = 'running')
SELECT held, stored, owner, owner_total, b, ok FROM verdict"""


def _turn_rows(marks: Sequence[TurnMark]) -> tuple[list[int], list[str], list[int], list[int]]:
    """``marks`` as one row per turn (turn ids, states, started_at, ended_at), so one
    statement applies them (a statement cannot change a row it inserted): what applying
    them in order gives — started at the turn's first mark, in the state of its first end
    (its time the end's), else running (ended_at 0)."""
    rows: dict[int, list[Any]] = {}
    for mark in marks:
        row = rows.setdefault(mark.turn_id, [TURN_RUNNING, mark.at, 0])
        if mark.state != TURN_RUNNING and row[0] == TURN_RUNNING:
            row[0], row[2] = mark.state, mark.at
    return (list(rows), [r[0] for r in rows.values()], [r[1] for r in rows.values()],
            [r[2] for r in rows.values()])


async def _write_part(con: Conn, batch: SessionBatch, quota: Quota | None) -> str:
    """Write ``batch`` with its turn marks (:data:`_WRITE_PART`): "" when written, else why
    not. A part refused for a quota is checked once more (its turn ends applied then): the
    statement's snapshot precedes its lock, so a part of the same events committed
    meanwhile (a batch sent again while the first try still ran) counted as new."""
    chunks = unlogged(batch.rows(), ())  # each first event id once
    args = (batch.session_id, batch.holder, batch.generation,
            [c.first for c in chunks], [c.last for c in chunks], [c.turn_id for c in chunks],
            [c.kind for c in chunks], [c.prefix for c in chunks], [c.payload for c in chunks],
            [c.at for c in chunks], [c.form for c in chunks],
            quota.session_bytes if quota is not None else 0,
            quota.owner_bytes if quota is not None else 0,
            *_turn_rows(batch.turns))
    for last_try in (False, True):
        row = await con.fetchrow(_WRITE_PART, *args, last_try)
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


class PgEvents(EventLogStore):
    """The event log half of :class:`~.pg_store.PostgresSessionStore`."""

    _clock: Clock

    if TYPE_CHECKING:  # PostgresHistory's, on the same pool
        async def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

        async def _transaction(self, op: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
        """Write ``batches`` in one transaction (:class:`~.event_log.EventLogStore`): each
        session's part with its turn marks in one statement (:data:`_WRITE_PART`). A batch
        of one part is that statement alone, its own transaction."""
        problems = [batch_problem(batch) for batch in batches]

        async def append(con: Conn) -> list[str]:
            refused = list(problems)
            for index, batch in enumerate(batches):
                if not refused[index]:
                    refused[index] = await _write_part(con, batch, quota)
            return refused

        if all(problems):
            return problems
        if len(batches) == 1:
            # May run twice: a part sent again is skipped, its marks change nothing more.
            return await self._call(append)
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
