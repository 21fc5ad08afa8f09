"""``session/fork`` on the SQLite store: the new row and the copy of the parent's history in
one ``BEGIN IMMEDIATE`` transaction (:mod:`.sql.fork` says what is written).

:class:`SqliteFork` is a base of :class:`~.sqlite.store.SqliteSessionStore`, on the
same connection and lock. The write lock is taken before the parent is read, so no
turn of the parent lands between the read and the copy, and the owner's total the
quota checks cannot change before the commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from services.session.store.checks import check_owner_quota, check_session_quota
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
    record_from_row,
)
from services.session.store.sqlite.db import immediate
from services.session.store.sqlite.history import SqliteHistory

__all__ = ["SqliteFork"]

_SET_FORK_STATE = f"{SET_FORK_STATE} RETURNING {SESSION_COLUMNS}"


class SqliteFork(SqliteHistory):
    """``fork_session`` of the SQLite store (on the history half's connection and lock)."""

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
        now = self._clock()
        async with self._lock:
            try:
                async with immediate(self._db):
                    rows = list(await self._db.execute_fetchall(FORK_SOURCE, (parent_id,)))
                    if not rows:
                        raise SessionNotFound(parent_id)
                    plan = fork_plan(
                        record_from_row(rows[0]), int(rows[0][LAST_TURN_AT]), session_id,
                        agent_alias=agent_alias, gateway_instance_id=gateway_instance_id,
                        host=host, public_url=public_url, claim_ttl_ms=claim_ttl_ms, now=now,
                        additional_directories=additional_directories,
                        mcp_servers_json=mcp_servers_json,
                        log_bytes=int(rows[0][LOG_BYTES_AT]))
                    check_session_quota(0, plan.copied_bytes, quota)
                    totals = list(await self._db.execute_fetchall(
                        ADD_OWNER_BYTES, (plan.owner, plan.copied_bytes)))
                    check_owner_quota(plan.owner, int(totals[0][0]), quota)
                    await self._db.execute(INSERT_SESSION, plan.insert)
                    await self._db.execute(COPY_HISTORY, (session_id, parent_id))
                    forked = list(await self._db.execute_fetchall(_SET_FORK_STATE, plan.state))
            except sqlite3.IntegrityError:
                raise SessionExists(f"Session already exists: {session_id}") from None
        return record_from_row(forked[0])
