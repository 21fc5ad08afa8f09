"""The PostgreSQL schema of the session store and its forward migrations.

The tables and columns are SQLite's (:mod:`.sqlite.schema`), with the same
checks, so both backends hold the same rows; the version numbers are shared
too. PostgreSQL support starts at version 4 (the first with claims, which
several hosts need), so an empty database is created at 4 in one step; later
versions add a step here and one in SQLite. Each step's DDL is frozen as that
version shipped it.

Several session services may open one database at once (several hosts): the
migration runs in one transaction holding a transaction-scoped advisory lock,
so exactly one of them migrates and the others then see the new version.
DDL is transactional in PostgreSQL, so a failed migration leaves nothing.

Beside the versions, :func:`prefer_lz4` has the event log's payloads compressed with
lz4 where the server can (else PostgreSQL's default, pglz stays): the log is written as
it flows, and pglz was about half of the server's CPU per logged event, on the relay's
cores (bench/PROFILE.md). A column setting, not a version: it changes no row.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import asyncpg

from services.common.logs import get_logger
from services.session.store.postgres.db import Conn
from services.session.store.records import LATEST_SCHEMA_VERSION, SchemaTooNew, StoreError

__all__ = ["FIRST_VERSION", "migrate", "prefer_lz4", "read_version"]

log = get_logger("session.store")

#: The version an empty database is created at.
FIRST_VERSION: Final = 4
#: The first server version that can choose a column's compression.
_COLUMN_COMPRESSION_SINCE: Final = 14
#: pg_attribute.attcompression of lz4.
_LZ4: Final = "l"
#: pg_advisory_xact_lock key of the migration: "acpgate" in ASCII, as a bigint.
_MIGRATION_LOCK: Final = 0x61637067617465

_V4_TABLES = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        agent_alias TEXT NOT NULL DEFAULT '',
        workspace_dir TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        last_activity BIGINT NOT NULL,
        token_count BIGINT NOT NULL DEFAULT 0,
        plan_json TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL DEFAULT 'inactive' CHECK (state IN ('active', 'inactive')),
        lease_id TEXT NOT NULL DEFAULT '',
        adapter_session_id TEXT NOT NULL DEFAULT '',
        title TEXT NOT NULL DEFAULT '',
        session_key TEXT NOT NULL DEFAULT '',
        spawned_by TEXT NOT NULL DEFAULT '',
        parent_session_key TEXT NOT NULL DEFAULT '',
        owner_session_key TEXT NOT NULL DEFAULT '',
        agent_id TEXT NOT NULL DEFAULT '',
        backend TEXT NOT NULL DEFAULT 'acpx',
        gateway_instance_id TEXT NOT NULL DEFAULT '',
        owner_created_at BIGINT NOT NULL DEFAULT 0,
        last_seq BIGINT NOT NULL DEFAULT 0,
        last_turn BIGINT NOT NULL DEFAULT 0,
        mcp_servers_json TEXT NOT NULL DEFAULT '',
        active_instance_id TEXT NOT NULL DEFAULT '',
        active_host TEXT NOT NULL DEFAULT '',
        active_until BIGINT NOT NULL DEFAULT 0)""",
    "CREATE INDEX sessions_by_activity ON sessions (last_activity DESC, id DESC)",
    "CREATE INDEX sessions_by_key ON sessions (session_key)",
    "CREATE INDEX sessions_by_workspace ON sessions (workspace_dir)",
    "CREATE INDEX sessions_by_claim ON sessions (active_instance_id)",
    # The role CHECK is the list as shipped, not HISTORY_ROLES: a new role needs a migration.
    """CREATE TABLE history (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        turn BIGINT NOT NULL,
        role TEXT NOT NULL
            CHECK (role IN ('user', 'assistant', 'thought', 'tool_call', 'tool_result')),
        text TEXT NOT NULL DEFAULT '',
        tool_call_id TEXT NOT NULL DEFAULT '',
        tool_name TEXT NOT NULL DEFAULT '',
        tool_kind TEXT NOT NULL DEFAULT '',
        title TEXT NOT NULL DEFAULT '',
        arguments_json TEXT NOT NULL DEFAULT '',
        output TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT '',
        content_json TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
)

#: v5: the agentCapabilities each alias's adapter advertised.
_V5_CAPABILITIES = """CREATE TABLE agent_capabilities (
    alias TEXT PRIMARY KEY,
    capabilities_json TEXT NOT NULL,
    recorded_at BIGINT NOT NULL)"""

#: v6: a session's extra roots, mode and config values, token totals, and the
#: usage of each turn.
_V6_SESSION_STATE = (
    "ALTER TABLE sessions ADD COLUMN additional_dirs_json TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE sessions ADD COLUMN mode_id TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN config_json TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN input_tokens BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN output_tokens BIGINT NOT NULL DEFAULT 0",
    """CREATE TABLE turn_usage (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        turn BIGINT NOT NULL,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        thought_tokens BIGINT NOT NULL DEFAULT 0,
        cached_read_tokens BIGINT NOT NULL DEFAULT 0,
        cached_write_tokens BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (session_id, turn))""",
)


#: v7: as SQLite's — the claim's generation, the stored bytes per row and per
#: owner, computed from the history already stored (``octet_length``: UTF-8 bytes).
_V7_FENCE_AND_BYTES = (
    "ALTER TABLE sessions ADD COLUMN claim_generation BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0",
    """CREATE TABLE owner_usage (
        owner_session_key TEXT PRIMARY KEY,
        stored_bytes BIGINT NOT NULL DEFAULT 0)""",
    "UPDATE sessions SET claim_generation = 1 WHERE active_instance_id != ''",
    """UPDATE sessions SET stored_bytes = COALESCE((
        SELECT SUM(octet_length(role) + octet_length(text) + octet_length(tool_call_id)
                   + octet_length(tool_name) + octet_length(tool_kind) + octet_length(title)
                   + octet_length(arguments_json) + octet_length(output)
                   + octet_length(status) + octet_length(content_json))
        FROM history WHERE history.session_id = sessions.id), 0)""",
    """INSERT INTO owner_usage (owner_session_key, stored_bytes)
        SELECT owner_session_key, SUM(stored_bytes) FROM sessions GROUP BY owner_session_key""",
)


#: v8 (session/fork): as SQLite's — the session a row was forked from.
_V8_FORKED_FROM = "ALTER TABLE sessions ADD COLUMN forked_from TEXT NOT NULL DEFAULT ''"

#: v9 (across hosts): as SQLite's — the claim holder's public URL.
_V9_CLAIM_URL = "ALTER TABLE sessions ADD COLUMN active_url TEXT NOT NULL DEFAULT ''"

#: v10: as SQLite's — the event log in chunks (payload: the bytes as relayed) and turn
#: states.
_V10_EVENT_LOG = (
    "ALTER TABLE sessions ADD COLUMN log_from_turn BIGINT NOT NULL DEFAULT 1",
    "UPDATE sessions SET log_from_turn = 0",
    """CREATE TABLE event_chunks (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        first_event_id BIGINT NOT NULL,
        last_event_id BIGINT NOT NULL,
        turn_id BIGINT NOT NULL DEFAULT 0,
        kind TEXT NOT NULL
            CHECK (kind IN ('update', 'prompt', 'permission', 'config', 'cancel')),
        prefix BYTEA NOT NULL DEFAULT '',
        payload BYTEA NOT NULL,
        at BIGINT NOT NULL,
        form INTEGER NOT NULL DEFAULT 0 CHECK (form IN (0, 1)),
        CHECK (last_event_id >= first_event_id),
        PRIMARY KEY (session_id, first_event_id))""",
    """CREATE TABLE turns (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        turn_id BIGINT NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('running', 'completed', 'cancelled', 'failed', 'interrupted')),
        instance_id TEXT NOT NULL DEFAULT '',
        started_at BIGINT NOT NULL,
        ended_at BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, turn_id))""",
    "CREATE INDEX turns_running ON turns (state) WHERE state = 'running'",
)


#: v11 (subagents): as SQLite's — the mark of a child session an agent runs.
_V11_SUBAGENT = "ALTER TABLE sessions ADD COLUMN subagent INTEGER NOT NULL DEFAULT 0"

#: v12: as SQLite's — the recorded protocol version, and the old child rows marked.
_V12_PROTOCOL_AND_OLD_CHILDREN = (
    "ALTER TABLE sessions ADD COLUMN protocol_version INTEGER NOT NULL DEFAULT 0",
    "UPDATE sessions SET subagent = 1 WHERE subagent = 0 AND parent_session_key <> ''"
    " AND spawned_by = parent_session_key AND adapter_session_id = '' AND last_turn = 0"
    " AND length(id) = 36 AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-'"
    " AND substr(id, 15, 1) = '5' AND substr(id, 19, 1) = '-'"
    " AND substr(id, 20, 1) IN ('8', '9', 'a', 'b') AND substr(id, 24, 1) = '-'",
)


async def read_version(con: Conn) -> int:
    """0 for a database without the store's tables, else the stored version."""
    exists = await con.fetchval("SELECT to_regclass('schema_version') IS NOT NULL")
    if not exists:
        if await con.fetchval("SELECT to_regclass('sessions') IS NOT NULL"):
            raise StoreError("the database has a sessions table but no schema_version: "
                             "not an acpgate store (left untouched)")
        return 0
    version = await con.fetchval("SELECT MAX(version) FROM schema_version")
    return int(version) if version is not None else 0


async def _create_v4(con: Conn) -> None:
    for stmt in _V4_TABLES:
        await con.execute(stmt)


async def _add_v5_capabilities(con: Conn) -> None:
    """v4 → v5: what each alias's adapter advertised when it last started."""
    await con.execute(_V5_CAPABILITIES)


async def _add_v6_session_state(con: Conn) -> None:
    """v5 → v6: a session's extra roots, mode, config values and token totals, with neutral
    defaults; the turns stored before have no usage rows."""
    for stmt in _V6_SESSION_STATE:
        await con.execute(stmt)


async def _add_v7_fence_and_bytes(con: Conn) -> None:
    """v6 → v7: claim generations and the stored byte totals, computed for every row."""
    for stmt in _V7_FENCE_AND_BYTES:
        await con.execute(stmt)


async def _add_v8_forked_from(con: Conn) -> None:
    """v7 → v8: the fork lineage column; no stored row is a fork."""
    await con.execute(_V8_FORKED_FROM)


async def _add_v9_claim_url(con: Conn) -> None:
    """v8 → v9: the claim holder's public URL; none recorded for older claims."""
    await con.execute(_V9_CLAIM_URL)


async def _add_v10_event_log(con: Conn) -> None:
    """v9 → v10: the event log and turn states; nothing logged for the turns before."""
    for stmt in _V10_EVENT_LOG:
        await con.execute(stmt)


async def _add_v11_subagent(con: Conn) -> None:
    """v10 → v11: the subagent mark; no stored row is marked."""
    await con.execute(_V11_SUBAGENT)


async def _add_v12_protocol_and_old_children(con: Conn) -> None:
    """v11 → v12: the recorded protocol version (none for the rows before), and the child
    rows stored before the subagent mark marked."""
    for stmt in _V12_PROTOCOL_AND_OLD_CHILDREN:
        await con.execute(stmt)


#: from-version → (to-version, step).
_STEPS: dict[int, tuple[int, Callable[[Conn], Awaitable[None]]]] = {
    0: (FIRST_VERSION, _create_v4),
    4: (5, _add_v5_capabilities),
    5: (6, _add_v6_session_state),
    6: (7, _add_v7_fence_and_bytes),
    7: (8, _add_v8_forked_from),
    8: (9, _add_v9_claim_url),
    9: (10, _add_v10_event_log),
    10: (11, _add_v11_subagent),
    11: (12, _add_v12_protocol_and_old_children),
}


async def prefer_lz4(con: Conn) -> None:
    """``event_chunks.payload`` compressed with lz4 from now on (rows written before keep
    theirs), unless it is already or cannot be (a server older than 14 or built without
    lz4, a role that does not own the table: it stays as it was). Run in the migration's
    locked transaction."""
    if con.get_server_version().major < _COLUMN_COMPRESSION_SINCE:
        return
    current = await con.fetchval(
        "SELECT attcompression FROM pg_attribute WHERE attrelid = 'event_chunks'::regclass"
        " AND attname = 'payload'")
    if current == _LZ4:
        return
    try:
        async with con.transaction():  # a savepoint: a refusal leaves the migration whole
            await con.execute(
                "ALTER TABLE event_chunks ALTER COLUMN payload SET COMPRESSION lz4")
    except (asyncpg.exceptions.FeatureNotSupportedError,
            asyncpg.exceptions.InsufficientPrivilegeError) as exc:
        log.info("session_store_no_lz4", backend="postgresql", reason=type(exc).__name__)


async def migrate(con: Conn) -> int:
    """Bring the database to :data:`LATEST_SCHEMA_VERSION` in one locked transaction;
    the version. A newer database is refused (SchemaTooNew), never downgraded."""
    async with con.transaction():
        await con.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        version = start = await read_version(con)
        if version > LATEST_SCHEMA_VERSION:
            raise SchemaTooNew(
                f"database schema version {version} is newer than this acpgate supports "
                f"({LATEST_SCHEMA_VERSION})"
            )
        while version < LATEST_SCHEMA_VERSION:
            if version not in _STEPS:
                raise StoreError(f"no migration from schema version {version}")
            version, step = _STEPS[version][0], _STEPS[version][1]
            await step(con)
        if version != start:
            await con.execute("DELETE FROM schema_version")
            await con.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
        await prefer_lz4(con)
    if version != start:
        log.info("session_store_migrated", backend="postgresql", from_version=start,
                 to_version=version)
    return version
