"""The session store on SQLite: rows and history on one aiosqlite connection.

Implements :class:`~services.session.store.interface.SessionStore` on a
connection from :mod:`.sqlite.db` whose schema :mod:`.sqlite.schema` has
brought up to date. Every write is one transaction: a single statement on its own
(the connection autocommits), several in one ``BEGIN IMMEDIATE``; a turn is
appended in one, all items or none (SPEC §8) — turns and history are the
half in :mod:`.sqlite.history`, a fork (its row and its copied history) :mod:`.sqlite.fork`. The same class serves the file and the
in-memory database of the fallback (:mod:`.opening`); a file's WAL is checkpointed by the
:class:`~.sqlite.checkpoint.Checkpointer` it is given, which it stops when it closes.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

import aiosqlite

from services.session.store.checks import (
    check_capabilities,
    check_claim,
    check_update,
)
from services.session.store.interface import (
    Clock,
)
from services.session.store.records import (
    NewSession,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    StoreError,
    StoreStatusInfo,
    refusal,
)
from services.session.store.sql.claims import (
    CLAIM_SESSION,
    delete_filter,
    release_statement,
    row_filter,
)
from services.session.store.sql.rows import (
    DELETE_SESSION_DATA,
    INSERT_SESSION,
    LIST_PAGE,
    SELECT_BY_SESSION_KEY,
    SELECT_CAPABILITIES,
    SELECT_SESSION,
    SESSION_COLUMNS,
    SUB_OWNER_BYTES,
    TOUCH_SESSION,
    UPSERT_CAPABILITIES,
    list_filter,
    new_row_values,
    record_from_row,
    update_assignments,
)
from services.session.store.sqlite.checkpoint import Checkpointer
from services.session.store.sqlite.db import immediate
from services.session.store.sqlite.events import SqliteEvents
from services.session.store.sqlite.fork import SqliteFork

__all__ = ["SqliteSessionStore"]

#: Session ids per ``IN (...)`` list (well under SQLite's bound on parameters).
_ID_CHUNK = 500
_TOUCH_SESSION = TOUCH_SESSION.format(greatest="MAX")
_SUB_OWNER_BYTES = SUB_OWNER_BYTES.format(greatest="MAX")
_RETURNING_ROW = f" RETURNING {SESSION_COLUMNS}"


class SqliteSessionStore(SqliteEvents, SqliteFork):
    """Session rows and history on one aiosqlite connection (a file, or memory).

    Calls are serialized on the connection by an asyncio lock, so a transaction
    is never interleaved with another coroutine's statements; other processes
    (other connections to the same file) are serialized by SQLite's own locks.
    """

    def __init__(self, db: aiosqlite.Connection, status: StoreStatusInfo, clock: Clock,
                 checkpointer: Checkpointer | None = None) -> None:
        self._db = db
        self.checkpointer = checkpointer
        self._clock = clock
        self._lock = asyncio.Lock()
        self._closed = False
        self.status = status

    async def close(self) -> None:
        """Stop the checkpointer, then close the connection (checkpointing WAL); a second
        call does nothing."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.checkpointer is not None:
                await self.checkpointer.stop()
            await self._db.close()

    # -- helpers

    async def _fetch_session(self, session_id: str) -> SessionRecord | None:
        # execute_fetchall: one hop to the connection's thread (a cursor's execute,
        # fetchone and close are three).
        rows = list(await self._db.execute_fetchall(SELECT_SESSION, (session_id,)))
        return record_from_row(rows[0]) if rows else None

    async def _refused(self, session_id: str) -> StoreError:
        """Why a conditional write changed nothing: another live claim, or no row."""
        return refusal(session_id, await self._fetch_session(session_id))

    # One write statement is its own transaction (the connection autocommits): atomic,
    # and it takes the write lock before it reads anything, as BEGIN IMMEDIATE would —
    # which would only add two hops to the connection's thread (bench/PROFILE.md).

    async def _write(self, sql: str, params: Sequence[Any]) -> int:
        """One write statement, its own transaction; returns the changed row count."""
        cur = await self._db.execute(sql, params)
        return cur.rowcount

    async def _write_row(self, sql: str, params: Sequence[Any]) -> SessionRecord | None:
        """One write statement, its own transaction; the row it wrote (None: no row
        matched), read by the same statement instead of a second SELECT."""
        rows = list(await self._db.execute_fetchall(sql + _RETURNING_ROW, params))
        return record_from_row(rows[0]) if rows else None

    # -- sessions

    async def create_session(self, new: NewSession) -> SessionRecord:
        """Write the row ``new`` describes, claimed as it asks."""
        values = new_row_values(new, self._clock())
        async with self._lock:
            try:
                rec = await self._write_row(INSERT_SESSION, values)
            except sqlite3.IntegrityError:
                raise SessionExists(f"Session already exists: {new.session_id}") from None
        assert rec is not None
        return rec

    async def get_session(self, session_id: str) -> SessionRecord:
        """The row of ``session_id`` or SessionNotFound."""
        async with self._lock:
            rec = await self._fetch_session(session_id)
        if rec is None:
            raise SessionNotFound(session_id)
        return rec

    async def find_by_session_key(self, session_key: str) -> SessionRecord | None:
        """The row whose SPEC §13 session key is ``session_key``, if stored."""
        if not session_key:
            return None
        async with self._lock:
            rows = list(await self._db.execute_fetchall(SELECT_BY_SESSION_KEY, (session_key,)))
        return record_from_row(rows[0]) if rows else None

    async def update_session(
        self,
        session_id: str,
        *,
        state: str | None = None,
        lease_id: str | None = None,
        adapter_session_id: str | None = None,
        plan_json: str | None = None,
        agent_alias: str | None = None,
        title: str | None = None,
        mcp_servers_json: str | None = None,
        mode_id: str | None = None,
        config_json: str | None = None,
        additional_directories: Sequence[str] | None = None,
        protocol_version: int | None = None,
        holder: str | None = None,
        generation: int = 0,
    ) -> SessionRecord:
        """Change the given fields (None = unchanged). Legacy rows get their ownership on
        the first alias they are bound to; ``holder`` (and ``generation``) guard against
        another's claim."""
        check_update(state, agent_alias, plan_json, mcp_servers_json, lease_id, mode_id=mode_id,
                     config_json=config_json, additional_directories=additional_directories,
                     protocol_version=protocol_version)
        sets, params = update_assignments(
            session_id, state=state, lease_id=lease_id, adapter_session_id=adapter_session_id,
            plan_json=plan_json, agent_alias=agent_alias, title=title,
            mcp_servers_json=mcp_servers_json, mode_id=mode_id, config_json=config_json,
            additional_directories=additional_directories,
            protocol_version=protocol_version,
        )
        where, args = row_filter(session_id, holder, generation)
        async with self._lock:
            if not sets:
                rec = await self._fetch_session(session_id)
                if rec is None:
                    raise SessionNotFound(session_id)
                return rec
            rec = await self._write_row(
                f"UPDATE sessions SET {', '.join(sets)} WHERE {where}", [*params, *args])
            if rec is None:
                raise await self._refused(session_id)
        return rec

    async def touch(self, session_id: str) -> SessionRecord:
        """Bump last_activity to now (never backwards)."""
        now = self._clock()
        async with self._lock:
            rec = await self._write_row(_TOUCH_SESSION, (now, session_id))
        if rec is None:
            raise SessionNotFound(session_id)
        return rec

    async def delete_session(self, session_id: str, *, holder: str | None = None) -> bool:
        """Remove the row, its history and its turn usage in one transaction, unless another
        instance than ``holder`` holds a live claim on it."""
        where, args = delete_filter(session_id, holder, self._clock())
        async with self._lock:
            async with immediate(self._db):
                # The row first: its condition decides, and the rest goes only with it.
                gone = list(await self._db.execute_fetchall(
                    f"DELETE FROM sessions WHERE {where}"
                    " RETURNING owner_session_key, stored_bytes", args))
                deleted = bool(gone)
                if deleted:
                    for stmt in DELETE_SESSION_DATA:
                        await self._db.execute(stmt, (session_id,))
                    await self._db.execute(_SUB_OWNER_BYTES, (gone[0][1], gone[0][0]))
            if not deleted and holder is not None:
                rec = await self._fetch_session(session_id)
                if rec is not None:
                    raise refusal(session_id, rec)
        return deleted

    async def list_sessions(
        self, *, cwd: str = "", after: tuple[int, str] | None = None, limit: int = 100,
        live: bool = False,
    ) -> list[SessionRecord]:
        """One page of rows, newest activity first, strictly after the ``after`` position."""
        clause, params = list_filter(cwd, after, self._clock() if live else 0)
        async with self._lock, self._db.execute(
            LIST_PAGE.format(where=clause), [*params, limit]
        ) as cur:
            return [record_from_row(r) async for r in cur]

    # -- claims

    async def claim(
        self, session_id: str, instance_id: str, *, host: str = "", ttl_ms: int,
        public_url: str = "",
    ) -> SessionRecord:
        """Take or renew the claim unless another instance's claim is live."""
        check_claim(instance_id, host, ttl_ms, public_url)
        now = self._clock()
        async with self._lock:
            rec = await self._write_row(
                CLAIM_SESSION,
                (instance_id, host, now + ttl_ms, public_url, session_id, instance_id, now))
            if rec is None:
                raise await self._refused(session_id)
        return rec

    async def renew_claims(
        self, instance_id: str, session_ids: Sequence[str], *, ttl_ms: int
    ) -> list[str]:
        """Extend the claims ``instance_id`` still holds among ``session_ids``."""
        check_claim(instance_id, "", ttl_ms)
        wanted = list(dict.fromkeys(session_ids))
        if not wanted:
            return []
        until = self._clock() + ttl_ms
        held: set[str] = set()
        async with self._lock, immediate(self._db):
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start:start + _ID_CHUNK]
                marks = ", ".join("?" * len(chunk))
                async with self._db.execute(
                    f"UPDATE sessions SET active_until = ? WHERE active_instance_id = ?"
                    f" AND id IN ({marks}) RETURNING id",
                    (until, instance_id, *chunk),
                ) as cur:
                    held.update([str(r[0]) async for r in cur])
        return [s for s in wanted if s in held]

    async def release_claim(self, session_id: str, instance_id: str,
                            generation: int = 0) -> bool:
        """Mark inactive and unclaim, unless another instance (or generation) holds it."""
        sql, params = release_statement(session_id, instance_id, generation)
        async with self._lock:
            changed = await self._write(sql, params)
        return changed > 0

    # -- agents

    async def set_agent_capabilities(self, alias: str, capabilities_json: str) -> None:
        """Upsert the alias's capabilities row."""
        check_capabilities(alias, capabilities_json)
        now = self._clock()
        async with self._lock:
            await self._write(UPSERT_CAPABILITIES, (alias, capabilities_json, now))

    async def get_agent_capabilities(self, alias: str) -> str:
        """The stored capabilities text, or ""."""
        async with self._lock:  # read on every session/new (ResolveNewSession)
            rows = list(await self._db.execute_fetchall(SELECT_CAPABILITIES, (alias,)))
        return str(rows[0][0]) if rows else ""
