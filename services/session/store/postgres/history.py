"""The history half of the PostgreSQL store: turns in one transaction each, history in pages.

:class:`PostgresHistory` is the base of :class:`~.postgres.store.PostgresSessionStore`
and holds the pooled calls both halves make (:meth:`~PostgresHistory._call`,
:meth:`~PostgresHistory._transaction`). A turn's transaction locks the session
row first (``FOR UPDATE``), so concurrent turns queue up on it and a takeover —
a claim, an update of that row — waits for the turn's commit or is seen by it
(the fence); the owner's byte total is an upserted row, locked too (the quotas).
The history is read in pages, byte-bounded for a big session (:mod:`.sql.history`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import asyncpg

from services.session.store.checks import (
    check_fence,
    check_owner_quota,
    check_session_quota,
    check_turn,
)
from services.session.store.interface import (
    DEFAULT_HISTORY_PAGE,
    HISTORY_PAGE_BYTES,
    Clock,
    SessionStore,
)
from services.session.store.postgres.db import (
    Conn,
    call,
    from_db,
    in_transaction,
    read_history_page,
    read_history_range,
    read_history_sizes,
    storable,
    to_db,
)
from services.session.store.records import (
    AppendResult,
    HistoryEntry,
    Quota,
    SessionNotFound,
    TurnUsage,
    item_bytes,
)
from services.session.store.sql.history import history_pages
from services.session.store.sql.rows import (
    ADD_OWNER_BYTES,
    INSERT_ITEM,
    INSERT_USAGE,
    SELECT_TURN_COUNTERS,
    UPDATE_AFTER_TURN,
    TurnRows,
    numbered,
    turn_target,
    usage_values,
)

__all__ = ["PostgresHistory"]

T = TypeVar("T")

_SELECT_TURN_COUNTERS = numbered(SELECT_TURN_COUNTERS) + " FOR UPDATE"
_INSERT_ITEM = numbered(INSERT_ITEM)
_INSERT_USAGE = numbered(INSERT_USAGE)
_ADD_OWNER_BYTES = numbered(ADD_OWNER_BYTES)
_UPDATE_AFTER_TURN = numbered(UPDATE_AFTER_TURN.format(greatest="GREATEST"))


class PostgresHistory(SessionStore):
    """``append_turn`` and ``iter_history_pages`` of the PostgreSQL store."""

    _pool: asyncpg.Pool
    _clock: Clock

    async def _call(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        """A repeatable operation on a pooled connection (see :func:`.postgres.db.call`)."""
        return await call(self._pool, self.status.db_path, op)

    async def _transaction(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        """An operation in one transaction (see :func:`.postgres.db.in_transaction`)."""
        return await in_transaction(self._pool, self.status.db_path, op)

    async def append_turn(
        self,
        session_id: str,
        items: Sequence[HistoryEntry],
        *,
        token_delta: int = 0,
        plan_json: str | None = None,
        usage: TurnUsage | None = None,
        holder: str | None = None,
        generation: int = 0,
        quota: Quota | None = None,
    ) -> AppendResult:
        """Append one completed turn in one transaction: every item or none (SPEC §8).

        The row is locked first, so concurrent turns (from any host) queue up on it, and a
        takeover (a claim: an update of that row) waits for the turn's commit or is seen by
        it; the owner's total row is locked by its upsert.
        """
        check_turn(items, token_delta, plan_json, usage)
        if not storable(session_id):
            raise SessionNotFound(session_id)
        adding = sum(map(item_bytes, items))
        now = self._clock()

        async def append(con: Conn) -> AppendResult:
            row = await con.fetchrow(_SELECT_TURN_COUNTERS, session_id)
            if row is None:
                raise SessionNotFound(session_id)
            target = turn_target(row, from_db)
            check_fence(session_id, target.claim, holder, generation)
            check_session_quota(target.stored_bytes, adding, quota)
            total = await con.fetchval(_ADD_OWNER_BYTES, target.owner, adding)
            check_owner_quota(target.owner, int(total), quota)
            turn = TurnRows(session_id, target.last_seq, target.last_turn + 1, target.title, now,
                            text=to_db)
            await con.executemany(_INSERT_ITEM, list(turn.rows(items)))
            if usage is not None:
                await con.execute(_INSERT_USAGE, *usage_values(session_id, turn.turn, usage, now))
            used = usage or TurnUsage()
            await con.execute(_UPDATE_AFTER_TURN, turn.seq, turn.turn, to_db(turn.title),
                              token_delta, used.input_tokens, used.output_tokens, now, plan_json,
                              adding, session_id)
            return AppendResult(turn=turn.turn, first_seq=turn.first, last_seq=turn.seq)

        return await self._transaction(append)

    async def iter_history_pages(
        self, session_id: str, *, after_seq: int = 0, page: int = DEFAULT_HISTORY_PAGE
    ) -> AsyncIterator[list[HistoryEntry]]:
        """The stored items oldest first: one non-empty list of at most ``page`` items per
        page, byte-bounded for a big history (SessionNotFound if no such row). A connection
        is held per query only."""
        rec = await self.get_session(session_id)
        call, sid, part = self._call, session_id, functools.partial
        big = rec.stored_bytes > HISTORY_PAGE_BYTES
        async for entries in history_pages(
                lambda after, limit: call(part(read_history_page, sid, after, limit)),
                lambda after, limit: call(part(read_history_sizes, sid, after, limit)),
                lambda after, last: call(part(read_history_range, sid, after, last)),
                after_seq=after_seq, page=page, max_bytes=HISTORY_PAGE_BYTES if big else None):
            yield entries
