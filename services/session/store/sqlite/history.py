"""The history half of the SQLite store: turns in one transaction each, history in pages.

:class:`SqliteHistory` is the base of :class:`~.sqlite.store.SqliteSessionStore`,
on the same connection and lock: a turn is appended in one ``BEGIN IMMEDIATE``
— the write lock taken before anything is read, so the claim (the fence) and
the byte totals (the quotas) it checks cannot change before the commit — and
the history is read in pages, byte-bounded for a big session (:mod:`.sql.history`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiosqlite

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
from services.session.store.records import (
    AppendResult,
    HistoryEntry,
    Quota,
    SessionNotFound,
    TurnUsage,
    item_bytes,
)
from services.session.store.sql.history import (
    SELECT_HISTORY_PAGE,
    SELECT_HISTORY_RANGE,
    SELECT_HISTORY_SIZES,
    history_pages,
    item_bytes_sql,
)
from services.session.store.sql.rows import (
    ADD_OWNER_BYTES,
    INSERT_ITEM,
    INSERT_USAGE,
    SELECT_TURN_COUNTERS,
    UPDATE_AFTER_TURN,
    TurnRows,
    turn_target,
    usage_values,
)
from services.session.store.sqlite.db import immediate

__all__ = ["SqliteHistory"]

_UPDATE_AFTER_TURN = UPDATE_AFTER_TURN.format(greatest="MAX")
#: length() of a BLOB counts bytes: the UTF-8 length of a text column.
_SELECT_HISTORY_SIZES = SELECT_HISTORY_SIZES.format(
    size=item_bytes_sql(lambda column: f"length(CAST({column} AS BLOB))"))


class SqliteHistory(SessionStore):
    """``append_turn`` and ``iter_history_pages`` of the SQLite store."""

    _db: aiosqlite.Connection
    _lock: asyncio.Lock
    _clock: Clock

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

        Items are validated as they are written, so a bad item after good ones
        proves the rollback; an unknown session, a fenced-off holder and a quota
        rolls back too. The write lock is taken first (``BEGIN IMMEDIATE``), so the
        claim and the totals it checks cannot change before the commit.
        """
        check_turn(items, token_delta, plan_json, usage)
        adding = sum(map(item_bytes, items))
        now = self._clock()
        async with self._lock, immediate(self._db):
            async with self._db.execute(SELECT_TURN_COUNTERS, (session_id,)) as cur:
                row = await cur.fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            target = turn_target(row)
            check_fence(session_id, target.claim, holder, generation)
            check_session_quota(target.stored_bytes, adding, quota)
            totals = list(await self._db.execute_fetchall(ADD_OWNER_BYTES, (target.owner, adding)))
            check_owner_quota(target.owner, int(totals[0][0]), quota)
            turn = TurnRows(session_id, target.last_seq, target.last_turn + 1, target.title, now)
            # executemany draws the rows lazily: a bad item raises after the good ones
            # before it were written, and the transaction rolls them back.
            await self._db.executemany(INSERT_ITEM, turn.rows(items))
            if usage is not None:
                await self._db.execute(INSERT_USAGE, usage_values(session_id, turn.turn, usage, now))
            used = usage or TurnUsage()
            await self._db.execute(_UPDATE_AFTER_TURN, (
                turn.seq, turn.turn, turn.title, token_delta, used.input_tokens,
                used.output_tokens, now, plan_json, adding, session_id))
        return AppendResult(turn=turn.turn, first_seq=turn.first, last_seq=turn.seq)

    async def iter_history_pages(
        self, session_id: str, *, after_seq: int = 0, page: int = DEFAULT_HISTORY_PAGE
    ) -> AsyncIterator[list[HistoryEntry]]:
        """The stored items oldest first as the store reads them: one non-empty list of at
        most ``page`` items per page, byte-bounded for a big history (SessionNotFound if no
        such row)."""
        rec = await self.get_session(session_id)

        async def read(sql: str, *params: object) -> list[Any]:
            async with self._lock:
                return list(await self._db.execute_fetchall(sql, (session_id, *params)))

        async def entries(sql: str, *params: object) -> list[HistoryEntry]:
            return [HistoryEntry(*r) for r in await read(sql, *params)]

        async def sizes(after: int, limit: int) -> list[tuple[int, int]]:
            return [(int(r[0]), int(r[1])) for r in await read(_SELECT_HISTORY_SIZES, after,
                                                               limit)]

        big = rec.stored_bytes > HISTORY_PAGE_BYTES
        async for rows in history_pages(
                lambda after, limit: entries(SELECT_HISTORY_PAGE, after, limit), sizes,
                lambda after, last: entries(SELECT_HISTORY_RANGE, after, last),
                after_seq=after_seq, page=page, max_bytes=HISTORY_PAGE_BYTES if big else None):
            yield rows
