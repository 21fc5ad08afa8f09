"""The session store on PostgreSQL: rows and history shared by several gateway hosts.

Implements :class:`~services.session.store.interface.SessionStore` on an
asyncpg pool (:mod:`.postgres.db`) whose database :mod:`.postgres.schema` has brought up
to date, with the statements SQLite uses (:mod:`.sql.rows`). Several session
services — one per host, or one for many edges — may share the database:

- a turn is one transaction that locks the session row (``FOR UPDATE``), so
  turns appended from anywhere get dense, unique seq numbers (turns and history
  are the half in :mod:`.postgres.history`, a fork with its copied history :mod:`.postgres.fork`);
- a claim is one conditional ``UPDATE``: under READ COMMITTED, a concurrent
  second update waits for the first and re-checks its ``WHERE`` against the
  committed row, so of two instances racing for one session exactly one wins;
- a holder's turn is fenced by the claim it read under that lock, and the owner's
  byte total is an upserted row, locked too, so neither a takeover nor an owner's
  other turns can slip between the check and the commit;
- a lost connection is :class:`~.records.StoreUnavailable`; the pool replaces
  broken connections, so the store works again once the server is back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import asyncpg

from services.session.store.checks import (
    check_capabilities,
    check_claim,
    check_update,
)
from services.session.store.interface import (
    Clock,
)
from services.session.store.postgres.db import (
    Conn,
    record_of,
    storable,
    to_db,
)
from services.session.store.postgres.events import PgEvents
from services.session.store.postgres.fork import PgFork
from services.session.store.postgres.liveness import (
    HOLDER_LIVE,
    HostLiveness,
    dead_holders,
    pg_claimable,
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
    numbered,
    update_assignments,
)

__all__ = ["PostgresSessionStore"]

_RETURNING_ROW = f" RETURNING {SESSION_COLUMNS}"
_SELECT_SESSION = numbered(SELECT_SESSION)
_SELECT_BY_SESSION_KEY = numbered(SELECT_BY_SESSION_KEY)
_TOUCH_SESSION = numbered(TOUCH_SESSION.format(greatest="GREATEST")) + _RETURNING_ROW
_CLAIM_SESSION = numbered(pg_claimable(CLAIM_SESSION)) + _RETURNING_ROW
_SUB_OWNER_BYTES = numbered(SUB_OWNER_BYTES.format(greatest="GREATEST"))
_UPSERT_CAPABILITIES = numbered(UPSERT_CAPABILITIES)
_SELECT_CAPABILITIES = numbered(SELECT_CAPABILITIES)
_INSERT_SESSION = numbered(INSERT_SESSION) + " ON CONFLICT (id) DO NOTHING" + _RETURNING_ROW
_DELETE_SESSION_DATA = tuple(numbered(stmt) for stmt in DELETE_SESSION_DATA)


class PostgresSessionStore(PgFork, PgEvents):
    """Session rows and history in a PostgreSQL database, through an asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool, status: StoreStatusInfo, clock: Clock,
                 liveness: HostLiveness | None = None) -> None:
        self._pool = pool
        self._clock = clock
        self._closed = False
        self.status = status
        #: The host locks this service holds (None: none, claims end by their lease only).
        self._liveness = liveness

    async def close(self) -> None:
        """Close the pool (waiting for calls in progress) and let the host locks go; a
        second call does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._liveness is not None:
            await self._liveness.close()
        await self._pool.close()

    async def hold_liveness(self, instance_id: str) -> None:
        """Hold ``instance_id``'s host lock from now on (:mod:`.postgres.liveness`)."""
        if self._liveness is not None and instance_id:
            await self._liveness.hold(instance_id)

    # -- helpers

    async def _fetch_session(self, con: Conn, session_id: str) -> SessionRecord | None:
        row = await con.fetchrow(_SELECT_SESSION, session_id)
        return record_of(row) if row is not None else None

    async def _refused(self, con: Conn, session_id: str) -> StoreError:
        return refusal(session_id, await self._fetch_session(con, session_id))

    async def _judged(self, con: Conn, recs: list[SessionRecord]) -> list[SessionRecord]:
        """``recs`` with the claims of dead hosts shown ended (``until`` 0): a claim is live
        only while its host's lock is held (:mod:`.postgres.liveness`), so nobody is sent there."""
        now = self._clock()
        holders = {r.claim.instance_id for r in recs if r.claim.live(now)}
        dead = await dead_holders(con, holders) if holders else set()
        if not dead:
            return recs
        return [replace(r, claim=replace(r.claim, until=0)) if r.claim.instance_id in dead
                else r for r in recs]

    async def _fetch_judged(self, con: Conn, sql: str, key: str) -> SessionRecord | None:
        """The one row ``sql`` selects by ``key``, its claim judged (:meth:`_judged`)."""
        row = await con.fetchrow(sql, key)
        return None if row is None else (await self._judged(con, [record_of(row)]))[0]

    # -- sessions

    async def create_session(self, new: NewSession) -> SessionRecord:
        """Write the row ``new`` describes, claimed as it asks."""
        values = new_row_values(new, self._clock(), text=to_db)

        async def insert(con: Conn) -> asyncpg.Record | None:
            return await con.fetchrow(_INSERT_SESSION, *values)

        if new.claim_ttl_ms is not None:
            await self.hold_liveness(new.gateway_instance_id)
        # In a transaction: a retry must not meet the row its own lost first try wrote.
        row = await self._transaction(insert)
        if row is None:
            raise SessionExists(f"Session already exists: {new.session_id}")
        return record_of(row)

    async def get_session(self, session_id: str) -> SessionRecord:
        """The row of ``session_id`` or SessionNotFound."""
        rec = None
        if storable(session_id):
            rec = await self._call(lambda con: self._fetch_judged(
                con, _SELECT_SESSION, session_id))
        if rec is None:
            raise SessionNotFound(session_id)
        return rec

    async def find_by_session_key(self, session_key: str) -> SessionRecord | None:
        """The row whose SPEC §13 session key is ``session_key``, if stored."""
        if not session_key or not storable(session_key):
            return None
        return await self._call(lambda con: self._fetch_judged(
            con, _SELECT_BY_SESSION_KEY, session_key))

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
        """Change the given fields (None = unchanged); ``holder`` (and ``generation``) guard
        against another's claim."""
        check_update(state, agent_alias, plan_json, mcp_servers_json, lease_id, mode_id=mode_id,
                     config_json=config_json, additional_directories=additional_directories,
                     protocol_version=protocol_version)
        if not storable(session_id):
            raise SessionNotFound(session_id)
        sets, params = update_assignments(
            session_id, state=state, lease_id=lease_id, adapter_session_id=adapter_session_id,
            plan_json=plan_json, agent_alias=agent_alias, title=title,
            mcp_servers_json=mcp_servers_json, mode_id=mode_id, config_json=config_json,
            additional_directories=additional_directories,
            protocol_version=protocol_version, text=to_db,
        )
        where, args = row_filter(session_id, holder, generation)
        if not sets:
            return await self.get_session(session_id)

        async def update(con: Conn) -> SessionRecord:
            row = await con.fetchrow(
                numbered(f"UPDATE sessions SET {', '.join(sets)} WHERE {where}")
                + _RETURNING_ROW,
                *params, *args,
            )
            if row is None:
                raise await self._refused(con, session_id)
            return record_of(row)

        return await self._call(update)

    async def touch(self, session_id: str) -> SessionRecord:
        """Bump last_activity to now (never backwards)."""
        row = None
        if storable(session_id):
            now = self._clock()
            row = await self._call(lambda con: con.fetchrow(_TOUCH_SESSION, now, session_id))
        if row is None:
            raise SessionNotFound(session_id)
        return record_of(row)

    async def delete_session(self, session_id: str, *, holder: str | None = None) -> bool:
        """Remove the row, its history and its turn usage in one transaction, unless another
        instance than ``holder`` holds a live claim on it."""
        if not storable(session_id):
            return False
        where, args = delete_filter(session_id, holder, self._clock())
        if holder is not None:  # a dead host's claim does not keep the row
            where = pg_claimable(where)

        async def delete(con: Conn) -> bool:
            # The row first: its condition decides (and locks it), the rest goes only with it.
            gone = await con.fetchrow(numbered(
                f"DELETE FROM sessions WHERE {where} RETURNING owner_session_key, stored_bytes"),
                *args)
            if gone is None:
                if holder is not None and await self._fetch_session(con, session_id):
                    raise await self._refused(con, session_id)
                return False
            for stmt in _DELETE_SESSION_DATA:
                await con.execute(stmt, session_id)
            await con.execute(_SUB_OWNER_BYTES, gone[1], gone[0])
            return True

        # In a transaction: all of it goes, or none. A retry after a lost first try finds
        # no row and answers False, as a second delete would.
        return await self._transaction(delete)

    async def list_sessions(
        self, *, cwd: str = "", after: tuple[int, str] | None = None, limit: int = 100,
        live: bool = False,
    ) -> list[SessionRecord]:
        """One page of rows, newest activity first, strictly after the ``after`` position."""
        if not storable(cwd) or (after is not None and not storable(after[1])):
            return []
        clause, params = list_filter(cwd, after, self._clock() if live else 0)
        if live:  # only the claims of live hosts (the clause is "WHERE ...": live_at)
            clause += f" AND {HOLDER_LIVE}"

        async def page(con: Conn) -> list[SessionRecord]:
            rows = await con.fetch(numbered(LIST_PAGE.format(where=clause)), *params, limit)
            return await self._judged(con, [record_of(r) for r in rows])

        return await self._call(page)

    # -- claims

    async def claim(
        self, session_id: str, instance_id: str, *, host: str = "", ttl_ms: int,
        public_url: str = "",
    ) -> SessionRecord:
        """Take or renew the claim unless another instance's claim is live."""
        check_claim(instance_id, host, ttl_ms, public_url)
        if not storable(session_id):
            raise SessionNotFound(session_id)
        await self.hold_liveness(instance_id)
        now = self._clock()

        async def take(con: Conn) -> SessionRecord:
            row = await con.fetchrow(
                _CLAIM_SESSION, instance_id, host, now + ttl_ms, public_url, session_id,
                instance_id, now)
            if row is None:
                raise await self._refused(con, session_id)
            return record_of(row)

        # Repeatable: a second try by the same instance renews what the first took.
        return await self._call(take)

    async def renew_claims(
        self, instance_id: str, session_ids: Sequence[str], *, ttl_ms: int
    ) -> list[str]:
        """Extend the claims ``instance_id`` still holds among ``session_ids``."""
        check_claim(instance_id, "", ttl_ms)
        wanted = [s for s in dict.fromkeys(session_ids) if storable(s)]
        if not wanted:
            return []
        await self.hold_liveness(instance_id)  # taken again if this service restarted
        until = self._clock() + ttl_ms
        rows = await self._call(lambda con: con.fetch(
            "UPDATE sessions SET active_until = $1 WHERE active_instance_id = $2"
            " AND id = ANY($3::text[]) RETURNING id",
            until, instance_id, wanted,
        ))
        held = {str(r[0]) for r in rows}
        return [s for s in wanted if s in held]

    async def release_claim(self, session_id: str, instance_id: str,
                            generation: int = 0) -> bool:
        """Mark inactive and unclaim, unless another instance (or generation) holds it."""
        if not storable(session_id):
            return False
        sql, params = release_statement(session_id, instance_id, generation)
        rows = await self._call(lambda con: con.fetch(numbered(sql) + " RETURNING id", *params))
        return bool(rows)

    # -- agents

    async def set_agent_capabilities(self, alias: str, capabilities_json: str) -> None:
        """Upsert the alias's capabilities row (JSON text holds no NUL: stored as is)."""
        check_capabilities(alias, capabilities_json)
        now = self._clock()
        # Repeatable: a second run writes the same row again.
        await self._call(lambda con: con.execute(
            _UPSERT_CAPABILITIES, alias, capabilities_json, now))

    async def get_agent_capabilities(self, alias: str) -> str:
        """The stored capabilities text, or ""."""
        if not storable(alias):
            return ""
        text = await self._call(lambda con: con.fetchval(_SELECT_CAPABILITIES, alias))
        return str(text) if text is not None else ""
