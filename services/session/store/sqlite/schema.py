"""The SQLite schema of the session store and its forward migrations.

A ``schema_version`` table records the version; a database written by an older
acpgate — down to the original minimal zeroclaw layout, "v1", which has no
version table — is brought to :data:`LATEST_SCHEMA_VERSION` in one transaction
when it is opened, and a newer one is refused. Each migration's DDL is frozen
as that version shipped it: a later change is a new migration, never an edit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import aiosqlite

from services.common.logs import get_logger
from services.common.protocol import (
    HISTORY_ROLE_ASSISTANT,
    HISTORY_ROLE_THOUGHT,
    HISTORY_ROLE_TOOL_RESULT,
    HISTORY_ROLE_USER,
)
from services.session.store.records import LATEST_SCHEMA_VERSION, SchemaTooNew, make_title
from services.session.store.sqlite.db import immediate

__all__ = ["migrate"]

log = get_logger("session.store")

#: v1: the original minimal zeroclaw layout.
_V1 = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        workspace_dir TEXT NOT NULL,
        created_at TEXT NOT NULL,
        last_activity TEXT NOT NULL)""",
    """CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at TEXT NOT NULL)""",
)

_V2_TABLES = (
    """CREATE TABLE schema_version (version INTEGER NOT NULL)""",
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        agent_alias TEXT NOT NULL DEFAULT '',
        workspace_dir TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_activity INTEGER NOT NULL,
        token_count INTEGER NOT NULL DEFAULT 0,
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
        owner_created_at INTEGER NOT NULL DEFAULT 0,
        last_seq INTEGER NOT NULL DEFAULT 0,
        last_turn INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX sessions_by_activity ON sessions(last_activity DESC, id DESC)",
    "CREATE INDEX sessions_by_key ON sessions(session_key)",
    "CREATE INDEX sessions_by_workspace ON sessions(workspace_dir)",
    # The role CHECK is v2's list as shipped, not HISTORY_ROLES: a new role needs a
    # migration (tests/session/test_store.py stores every HISTORY_ROLES role).
    """CREATE TABLE history (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        turn INTEGER NOT NULL,
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
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, seq)) WITHOUT ROWID""",
    #: Every v1 message kept verbatim (roles v2 has no slot for, e.g. "system", stay here).
    """CREATE TABLE legacy_messages_v1 (
        session_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at TEXT NOT NULL)""",
)

#: v4: which gateway instance (host) serves the session now, until when (several hosts).
_V4_CLAIM = (
    "ALTER TABLE sessions ADD COLUMN active_instance_id TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN active_host TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN active_until INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX sessions_by_claim ON sessions(active_instance_id)",
)

#: v5: the agentCapabilities each alias's adapter advertised.
_V5_CAPABILITIES = """CREATE TABLE agent_capabilities (
    alias TEXT PRIMARY KEY,
    capabilities_json TEXT NOT NULL,
    recorded_at INTEGER NOT NULL)"""

#: v6: a session's extra roots, mode and config values, token totals, and the
#: usage of each turn.
_V6_SESSION_STATE = (
    "ALTER TABLE sessions ADD COLUMN additional_dirs_json TEXT NOT NULL DEFAULT '[]'",
    "ALTER TABLE sessions ADD COLUMN mode_id TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN config_json TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE turn_usage (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        thought_tokens INTEGER NOT NULL DEFAULT 0,
        cached_read_tokens INTEGER NOT NULL DEFAULT 0,
        cached_write_tokens INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, turn)) WITHOUT ROWID""",
)

#: v7: the claim's generation (the fence of a holder's writes) and the bytes of
#: the stored history, per row and per owner (the quotas). Claimed rows start at generation
#: 1; the byte totals are computed from the history already stored.
_V7_FENCE_AND_BYTES = (
    "ALTER TABLE sessions ADD COLUMN claim_generation INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE sessions ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE owner_usage (
        owner_session_key TEXT PRIMARY KEY,
        stored_bytes INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID""",
    "UPDATE sessions SET claim_generation = 1 WHERE active_instance_id != ''",
    # length(CAST(x AS BLOB)) is the UTF-8 byte length of a text value (length() counts
    # characters): the same count as the store's item_bytes.
    """UPDATE sessions SET stored_bytes = COALESCE((
        SELECT SUM(length(CAST(role AS BLOB)) + length(CAST(text AS BLOB))
                   + length(CAST(tool_call_id AS BLOB)) + length(CAST(tool_name AS BLOB))
                   + length(CAST(tool_kind AS BLOB)) + length(CAST(title AS BLOB))
                   + length(CAST(arguments_json AS BLOB)) + length(CAST(output AS BLOB))
                   + length(CAST(status AS BLOB)) + length(CAST(content_json AS BLOB)))
        FROM history WHERE history.session_id = sessions.id), 0)""",
    """INSERT INTO owner_usage (owner_session_key, stored_bytes)
        SELECT owner_session_key, SUM(stored_bytes) FROM sessions GROUP BY owner_session_key""",
)

#: v8 (session/fork): the session a row was forked from ("" for every row before).
#: A migration step of its own: another v8 step of the same release may be renumbered
#: around it on merge.
_V8_FORKED_FROM = "ALTER TABLE sessions ADD COLUMN forked_from TEXT NOT NULL DEFAULT ''"

#: v9 (across hosts): the public URL of the claim's holder (its ``[gateway]
#: public_url``), where another host tells a client to reconnect; "" for every claim
#: taken before (unknown until its holder claims again).
_V9_CLAIM_URL = "ALTER TABLE sessions ADD COLUMN active_url TEXT NOT NULL DEFAULT ''"

#: v10: the session's event log — every relayed update and client action, by event id, in
#: chunks of consecutive ids (one row per commit window's run, not per update) —
#: and the state of each turn; ``log_from_turn``: the first history turn the log covers
#: (a new row's log covers all, 1; 0 = a row older than the log, or a fork, until its first
#: logged event: a replay reads the history alone).
_V10_EVENT_LOG = (
    "ALTER TABLE sessions ADD COLUMN log_from_turn INTEGER NOT NULL DEFAULT 1",
    "UPDATE sessions SET log_from_turn = 0",
    """CREATE TABLE event_chunks (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        first_event_id INTEGER NOT NULL,
        last_event_id INTEGER NOT NULL,
        turn_id INTEGER NOT NULL DEFAULT 0,
        kind TEXT NOT NULL
            CHECK (kind IN ('update', 'prompt', 'permission', 'config', 'cancel')),
        prefix BLOB NOT NULL DEFAULT X'',
        payload BLOB NOT NULL,
        at INTEGER NOT NULL,
        form INTEGER NOT NULL DEFAULT 0 CHECK (form IN (0, 1)),
        CHECK (last_event_id >= first_event_id),
        PRIMARY KEY (session_id, first_event_id))""",
    """CREATE TABLE turns (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        turn_id INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('running', 'completed', 'cancelled', 'failed', 'interrupted')),
        instance_id TEXT NOT NULL DEFAULT '',
        started_at INTEGER NOT NULL,
        ended_at INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, turn_id)) WITHOUT ROWID""",
    "CREATE INDEX turns_running ON turns(state) WHERE state = 'running'",
)

#: v11 (subagents): 1 on a row of a child session an agent runs (a v2 agent's subagent,
#: stored under its parent): it has no agent session of its own to restore. No row
#: stored before is one (a child stored by v10 cannot be told apart; it stays 0).
_V11_SUBAGENT = "ALTER TABLE sessions ADD COLUMN subagent INTEGER NOT NULL DEFAULT 0"

#: v12: the ACP version a session's agent speaks, as its ``initialize`` chose it
#: (0 = not recorded: a row written before, or no agent started yet), and the subagent
#: mark on the child rows stored before v11 — recognisable by the id acpgate gives a child
#: (a name-based UUID, version 5, where every other session id acpgate makes is random,
#: version 4) under a parent that spawned it, never restored itself (no agent session,
#: no turn of its own).
_V12_PROTOCOL_AND_OLD_CHILDREN = (
    "ALTER TABLE sessions ADD COLUMN protocol_version INTEGER NOT NULL DEFAULT 0",
    "UPDATE sessions SET subagent = 1 WHERE subagent = 0 AND parent_session_key <> ''"
    " AND spawned_by = parent_session_key AND adapter_session_id = '' AND last_turn = 0"
    " AND length(id) = 36 AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-'"
    " AND substr(id, 15, 1) = '5' AND substr(id, 19, 1) = '-'"
    " AND substr(id, 20, 1) IN ('8', '9', 'a', 'b') AND substr(id, 24, 1) = '-'",
)

#: A v1 message role → its v2 history role (others are kept only in legacy_messages_v1).
_LEGACY_ROLE_MAP = {
    "user": HISTORY_ROLE_USER,
    "assistant": HISTORY_ROLE_ASSISTANT,
    "thought": HISTORY_ROLE_THOUGHT,
    "reasoning": HISTORY_ROLE_THOUGHT,
    "tool": HISTORY_ROLE_TOOL_RESULT,
}


def _legacy_ms(value: Any, fallback: int) -> int:
    """A v1 timestamp (RFC 3339 text, or epoch seconds/ms) → epoch ms."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value if value > 100_000_000_000 else value * 1000)
    if isinstance(value, str):
        text = value.strip()
        try:
            return _legacy_ms(float(text), fallback)
        except ValueError:
            pass
        try:
            return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return fallback
    return fallback


async def _table_names(db: aiosqlite.Connection) -> set[str]:
    async with db.execute("SELECT name FROM sqlite_master WHERE type = 'table'") as cur:
        return {str(r[0]) async for r in cur}


async def _read_version(db: aiosqlite.Connection) -> int:
    """0 = empty file, 1 = the zeroclaw layout (no version table), else the stored version."""
    tables = await _table_names(db)
    if "schema_version" in tables:
        async with db.execute("SELECT MAX(version) FROM schema_version") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row and row[0] is not None else 0
    if "sessions" in tables:
        return 1
    return 0


async def _migrate_0_to_1(db: aiosqlite.Connection, now: int) -> None:
    for stmt in _V1:
        await db.execute(stmt)


async def _migrate_1_to_2(db: aiosqlite.Connection, now: int) -> None:
    """v1 → v2: typed ms timestamps, ownership, history items; v1 messages kept verbatim."""
    await db.execute("ALTER TABLE sessions RENAME TO sessions_v1")
    await db.execute("ALTER TABLE messages RENAME TO messages_v1")
    for stmt in _V2_TABLES:
        await db.execute(stmt)
    async with db.execute(
        "SELECT id, workspace_dir, created_at, last_activity FROM sessions_v1"
    ) as cur:
        old_sessions = [tuple(r) async for r in cur]
    for sid, workspace, created, last in old_sessions:
        created_ms = _legacy_ms(created, now)
        await db.execute(
            "INSERT INTO sessions (id, workspace_dir, created_at, last_activity, owner_created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (str(sid), str(workspace), created_ms, _legacy_ms(last, created_ms), created_ms),
        )
    async with db.execute(
        "SELECT session_id, role, content, created_at FROM messages_v1 ORDER BY rowid"
    ) as cur:
        old_messages = [tuple(r) async for r in cur]
    known = {str(s[0]) for s in old_sessions}
    counters: dict[str, tuple[int, int, str]] = {}  # sid -> (last_seq, last_turn, title)
    for sid, role, content, created in old_messages:
        sid, role, content = str(sid), str(role), str(content)
        await db.execute(
            "INSERT INTO legacy_messages_v1 (session_id, role, content, created_at)"
            " VALUES (?, ?, ?, ?)",
            (sid, role, content, str(created)),
        )
        new_role = _LEGACY_ROLE_MAP.get(role.lower())
        if new_role is None or sid not in known:
            continue
        seq, turn, title = counters.get(sid, (0, 0, ""))
        if new_role == HISTORY_ROLE_USER or turn == 0:
            turn += 1
        if new_role == HISTORY_ROLE_USER and not title:
            title = make_title(content)
        seq += 1
        text, output = (content, "") if new_role != HISTORY_ROLE_TOOL_RESULT else ("", content)
        await db.execute(
            "INSERT INTO history (session_id, seq, turn, role, text, output, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (sid, seq, turn, new_role, text, output, _legacy_ms(created, now)),
        )
        counters[sid] = (seq, turn, title)
    for sid, (seq, turn, title) in counters.items():
        await db.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, title = ? WHERE id = ?",
            (seq, turn, title, sid),
        )
    await db.execute("DROP TABLE messages_v1")
    await db.execute("DROP TABLE sessions_v1")


async def _migrate_2_to_3(db: aiosqlite.Connection, now: int) -> None:
    """v2 → v3: the session's MCP server list; existing rows have none stored."""
    await db.execute("ALTER TABLE sessions ADD COLUMN mcp_servers_json TEXT NOT NULL DEFAULT ''")


async def _migrate_3_to_4(db: aiosqlite.Connection, now: int) -> None:
    """v3 → v4: the claim columns; every existing row starts unclaimed."""
    for stmt in _V4_CLAIM:
        await db.execute(stmt)


async def _migrate_4_to_5(db: aiosqlite.Connection, now: int) -> None:
    """v4 → v5: what each alias's adapter advertised when it last started."""
    await db.execute(_V5_CAPABILITIES)


async def _migrate_5_to_6(db: aiosqlite.Connection, now: int) -> None:
    """v5 → v6: a session's extra roots, mode, config values and token totals, with neutral
    defaults; the turns stored before have no usage rows."""
    for stmt in _V6_SESSION_STATE:
        await db.execute(stmt)


async def _migrate_6_to_7(db: aiosqlite.Connection, now: int) -> None:
    """v6 → v7: claim generations and the stored byte totals, computed for every row."""
    for stmt in _V7_FENCE_AND_BYTES:
        await db.execute(stmt)


async def _migrate_7_to_8(db: aiosqlite.Connection, now: int) -> None:
    """v7 → v8: the fork lineage column; no stored row is a fork."""
    await db.execute(_V8_FORKED_FROM)


async def _migrate_8_to_9(db: aiosqlite.Connection, now: int) -> None:
    """v8 → v9: the claim holder's public URL; none recorded for older claims."""
    await db.execute(_V9_CLAIM_URL)


async def _migrate_9_to_10(db: aiosqlite.Connection, now: int) -> None:
    """v9 → v10: the event log and turn states; nothing logged for the turns before."""
    for stmt in _V10_EVENT_LOG:
        await db.execute(stmt)


async def _migrate_10_to_11(db: aiosqlite.Connection, now: int) -> None:
    """v10 → v11: the subagent mark; no stored row is marked."""
    await db.execute(_V11_SUBAGENT)


async def _migrate_11_to_12(db: aiosqlite.Connection, now: int) -> None:
    """v11 → v12: the recorded protocol version (none for the rows before), and the child
    rows stored before the subagent mark marked."""
    for stmt in _V12_PROTOCOL_AND_OLD_CHILDREN:
        await db.execute(stmt)


_MIGRATIONS: dict[int, Callable[[aiosqlite.Connection, int], Any]] = {
    0: _migrate_0_to_1,
    1: _migrate_1_to_2,
    2: _migrate_2_to_3,
    3: _migrate_3_to_4,
    4: _migrate_4_to_5,
    5: _migrate_5_to_6,
    6: _migrate_6_to_7,
    7: _migrate_7_to_8,
    8: _migrate_8_to_9,
    9: _migrate_9_to_10,
    10: _migrate_10_to_11,
    11: _migrate_11_to_12,
}


async def migrate(db: aiosqlite.Connection, now: int) -> int:
    """Bring the database to :data:`LATEST_SCHEMA_VERSION` in one transaction; the version."""
    async with immediate(db):
        version = await _read_version(db)
        if version > LATEST_SCHEMA_VERSION:
            raise SchemaTooNew(
                f"database schema version {version} is newer than this acpgate supports "
                f"({LATEST_SCHEMA_VERSION})"
            )
        start = version
        while version < LATEST_SCHEMA_VERSION:
            await _MIGRATIONS[version](db, now)
            version += 1
        if version != start:
            await db.execute("DELETE FROM schema_version")
            await db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    if start != version:
        log.info("session_store_migrated", from_version=start, to_version=version)
    return version
