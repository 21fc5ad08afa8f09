"""``session/fork`` on the PostgreSQL store: the new row and the copy of the parent's history
in one transaction (:mod:`.sql.fork` says what is written).

:class:`PgFork` is a base of :class:`~.postgres.store.PostgresSessionStore`. The parent's
row is read ``FOR SHARE``: a turn of the parent that is being appended (its
transaction holds the row ``FOR UPDATE``) commits first and is copied whole, and
none starts before the copy commits; a turn from any host is either in the fork or
not at all. The owner's total is an upserted row, locked by the upsert, so the
quota check holds until the commit, as for a turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from services.session.store.checks import check_owner_quota, check_session_quota
from services.session.store.postgres.db import Conn, record_of, storable, to_db
from services.session.store.postgres.history import PostgresHistory
from services.session.store.records import (
    Quota,
    SessionExists,
    SessionNotFound,
    SessionRecord,
)
from services.session.store.sql.fork import (
    COPY_HISTORY,
    FORK_SOURCE,
    LAST_TURN_AT,
    LOG_BYTES_AT,
    SET_FORK_STATE,
    fork_plan,
)
from services.session.store.sql.rows import (
    ADD_OWNER_BYTES,
    INSERT_SESSION,
    SESSION_COLUMNS,
    numbered,
)

__all__ = ["PgFork"]

_FORK_SOURCE = numbered(FORK_SOURCE) + " FOR SHARE"
_ADD_OWNER_BYTES = numbered(ADD_OWNER_BYTES)
#: Nothing when the id is taken (no error to roll back on): the fork is then SessionExists.
_INSERT_SESSION = numbered(INSERT_SESSION) + " ON CONFLICT (id) DO NOTHING RETURNING id"
_COPY_HISTORY = numbered(COPY_HISTORY)
_SET_FORK_STATE = numbered(SET_FORK_STATE) + f" RETURNING {SESSION_COLUMNS}"


class PgFork(PostgresHistory):
    """``fork_session`` of the PostgreSQL store (on the history half's pooled calls)."""

    async def fork_session(
        self,
        parent_id: str,
        session_id: str,
        *,
        agent_alias: str,
        gateway_instance_id: str,
        claim_ttl_ms: int,
        host: str = "",
        public_url: str = "",
        additional_directories: Sequence[str] | None = None,
        mcp_servers_json: str | None = None,
        quota: Quota | None = None,
    ) -> SessionRecord:
        """A new row with a copy of ``parent_id``'s history, in one transaction."""
        if not storable(parent_id):
            raise SessionNotFound(parent_id)
        await self.hold_liveness(gateway_instance_id)
        now = self._clock()

        async def fork(con: Conn) -> asyncpg.Record:
            row = await con.fetchrow(_FORK_SOURCE, parent_id)
            if row is None:
                raise SessionNotFound(parent_id)
            plan = fork_plan(record_of(row), int(row[LAST_TURN_AT]), session_id,
                             agent_alias=agent_alias, gateway_instance_id=gateway_instance_id,
                             host=host, public_url=public_url, claim_ttl_ms=claim_ttl_ms, now=now,
                             additional_directories=additional_directories,
                             mcp_servers_json=mcp_servers_json, text=to_db,
                             log_bytes=int(row[LOG_BYTES_AT]))
            check_session_quota(0, plan.copied_bytes, quota)
            total = await con.fetchval(_ADD_OWNER_BYTES, plan.owner, plan.copied_bytes)
            check_owner_quota(plan.owner, int(total), quota)
            if await con.fetchval(_INSERT_SESSION, *plan.insert) is None:
                raise SessionExists(f"Session already exists: {session_id}")
            await con.execute(_COPY_HISTORY, session_id, parent_id)
            forked = await con.fetchrow(_SET_FORK_STATE, *plan.state)
            assert forked is not None
            return forked

        # In a transaction: a retry must not meet the row its own lost first try wrote.
        return record_of(await self._transaction(fork))
