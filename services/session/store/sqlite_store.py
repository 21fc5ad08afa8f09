"""The session store: one SQLite file (aiosqlite), or memory when the file cannot be used.

``<data dir>/sessions/acp-sessions.db`` in WAL mode with a busy timeout and
foreign keys on (SPEC §8). A ``schema_version`` table plus forward migrations
let a database written by an older acpgate — down to the original minimal
zeroclaw layout, "v1" — open in a newer one. Every turn is appended in one
``BEGIN IMMEDIATE`` transaction: all items or none.

If the file cannot be used (read-only dir, ``sessions`` is a file, a corrupt
or newer-schema file) the store runs on an in-memory SQLite database with the
same code, and :attr:`SessionStore.status` says why. A file that is not a
SQLite database is never opened for writing, so it is never overwritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from services.common.logs import get_logger
from services.common.protocol import MSG_SESSION_NOT_FOUND

__all__ = [
    "BACKEND",
    "LATEST_SCHEMA_VERSION",
    "ROLES",
    "AppendResult",
    "Clock",
    "HistoryEntry",
    "InvalidItem",
    "Ownership",
    "SessionExists",
    "SessionNotFound",
    "SessionRecord",
    "SessionStore",
    "StoreStatusInfo",
    "make_title",
    "open_store",
    "session_key_for",
    "wall_clock_ms",
]

log = get_logger("session.store")

#: A clock in milliseconds since the epoch (injected so tests control time).
Clock = Callable[[], int]

BACKEND = "acpx"
ROLES = ("user", "assistant", "thought", "tool_call", "tool_result")
STATES = ("active", "inactive")
TOOL_STATUSES = ("", "pending", "in_progress", "completed", "failed")
LATEST_SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 10_000
SQLITE_HEADER = b"SQLite format 3\x00"
TITLE_MAX = 80
_PAGE = 500


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, from the system clock."""
    return int(time.time() * 1000)


def session_key_for(alias: str, session_id: str) -> str:
    """The SPEC §13 session key: ``agent:<alias>:acp:<sessionId>``."""
    return f"agent:{alias}:acp:{session_id}"


def make_title(text: str) -> str:
    """A one-line title of at most 80 characters (whitespace collapsed, ``…`` when cut)."""
    line = " ".join(text.split())
    if len(line) <= TITLE_MAX:
        return line
    return line[: TITLE_MAX - 1].rstrip() + "…"


# ------------------------------------------------------------------ records and errors


class StoreError(Exception):
    """Base class of the store's refusals."""


class SessionNotFound(StoreError):
    """No row with that session id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(MSG_SESSION_NOT_FOUND.format(session_id=session_id))
        self.session_id = session_id


class SessionExists(StoreError):
    """A row with that session id already exists."""


class InvalidItem(StoreError):
    """A turn item (or the turn itself) is malformed; the whole turn was rolled back."""


@dataclass(frozen=True)
class Ownership:
    """The ownership metadata of SPEC §13."""

    session_key: str = ""
    spawned_by: str = ""
    parent_session_key: str = ""
    owner_session_key: str = ""
    agent_id: str = ""
    backend: str = BACKEND
    gateway_instance_id: str = ""
    created_at: int = 0


@dataclass(frozen=True)
class SessionRecord:
    """One stored session row (SPEC §8, §13)."""

    session_id: str
    agent_alias: str
    workspace_dir: str
    created_at: int
    last_activity: int
    token_count: int = 0
    plan_json: str = ""
    state: str = "inactive"
    lease_id: str = ""
    adapter_session_id: str = ""
    title: str = ""
    ownership: Ownership = field(default_factory=Ownership)
    #: Number of stored history items.
    message_count: int = 0


@dataclass(frozen=True)
class HistoryEntry:
    """One stored conversation item; ``seq``/``turn``/``created_at`` are set by the store."""

    role: str
    text: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    tool_kind: str = ""
    title: str = ""
    arguments_json: str = ""
    output: str = ""
    status: str = ""
    content_json: str = ""
    seq: int = 0
    turn: int = 0
    created_at: int = 0


@dataclass(frozen=True)
class AppendResult:
    """Where a turn landed: its number and the seq range of its items."""

    turn: int
    first_seq: int
    last_seq: int


@dataclass(frozen=True)
class StoreStatusInfo:
    """Whether the store is persistent, where, and why not (SPEC §2)."""

    persistent: bool
    db_path: str
    fallback_reason: str
    schema_version: int


# ------------------------------------------------------------------ schema and migrations

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

_LEGACY_ROLE_MAP = {
    "user": "user",
    "assistant": "assistant",
    "thought": "thought",
    "reasoning": "thought",
    "tool": "tool_result",
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
        if new_role == "user" or turn == 0:
            turn += 1
        if new_role == "user" and not title:
            title = make_title(content)
        seq += 1
        text, output = (content, "") if new_role != "tool_result" else ("", content)
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


_MIGRATIONS: dict[int, Callable[[aiosqlite.Connection, int], Any]] = {
    0: _migrate_0_to_1,
    1: _migrate_1_to_2,
}


@contextlib.asynccontextmanager
async def _immediate(db: aiosqlite.Connection) -> AsyncIterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction: COMMIT at the end of the body, ROLLBACK if the
    body or the COMMIT raises (cancellation included)."""
    await db.execute("BEGIN IMMEDIATE")
    try:
        yield
        await db.execute("COMMIT")
    except BaseException:
        await db.execute("ROLLBACK")
        raise


async def _migrate(db: aiosqlite.Connection, now: int) -> int:
    """Bring the database to :data:`LATEST_SCHEMA_VERSION` in one transaction; the version."""
    async with _immediate(db):
        version = await _read_version(db)
        if version > LATEST_SCHEMA_VERSION:
            raise StoreError(
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


# ------------------------------------------------------------------ opening


def _prepare_file(db_path: Path) -> None:
    """Create the parent dir; refuse anything that must not be opened (blocking; off-loop)."""
    parent = db_path.parent
    if parent.exists() and not parent.is_dir():
        raise StoreError(f"{parent} exists and is not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {parent}: {exc.strerror or exc}") from None
    if db_path.exists():
        if not db_path.is_file():
            raise StoreError(f"{db_path} is not a regular file")
        try:
            with db_path.open("rb") as fh:
                header = fh.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise StoreError(f"cannot read {db_path}: {exc.strerror or exc}") from None
        if header and header != SQLITE_HEADER:
            raise StoreError(f"{db_path} is not a SQLite database (left untouched)")
    elif not os.access(parent, os.W_OK):
        raise StoreError(f"{parent} is not writable")


async def _connect(target: str) -> aiosqlite.Connection:
    db = await aiosqlite.connect(target, isolation_level=None)
    try:
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA foreign_keys = ON")
        if target != ":memory:":
            async with db.execute("PRAGMA quick_check") as cur:
                row = await cur.fetchone()
            if not row or row[0] != "ok":
                raise StoreError(f"{target} failed its integrity check (left untouched)")
            async with db.execute("PRAGMA journal_mode = WAL") as cur:
                mode = await cur.fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                raise StoreError(f"{target}: cannot switch to WAL mode")
            await db.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        await db.close()
        raise
    return db


async def open_store(db_path: Path | None, *, clock: Clock = wall_clock_ms) -> SessionStore:
    """Open the store at ``db_path`` (``None`` = memory), falling back to memory on failure.

    Never raises for a bad file: the reason is in :attr:`SessionStore.status`.
    """
    reason = ""
    if db_path is not None:
        db: aiosqlite.Connection | None = None
        try:
            await asyncio.to_thread(_prepare_file, db_path)
            db = await _connect(str(db_path))
            version = await _migrate(db, clock())
            status = StoreStatusInfo(True, str(db_path), "", version)
            log.info("session_store_opened", db_path=str(db_path), schema_version=version)
            return SessionStore(db, status, clock)
        except (StoreError, sqlite3.Error, OSError) as exc:
            if db is not None:
                with contextlib.suppress(sqlite3.Error):
                    await db.close()
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, sqlite3.Error):
                reason = f"{db_path}: {reason}"
            log.warning("session_store_memory_fallback", db_path=str(db_path), reason=reason)
    else:
        reason = "no database path configured"
    mem = await _connect(":memory:")
    version = await _migrate(mem, clock())
    return SessionStore(mem, StoreStatusInfo(False, "", reason, version), clock)


# ------------------------------------------------------------------ the store

_SESSION_COLUMNS = (
    "id, agent_alias, workspace_dir, created_at, last_activity, token_count, plan_json, state,"
    " lease_id, adapter_session_id, title, session_key, spawned_by, parent_session_key,"
    " owner_session_key, agent_id, backend, gateway_instance_id, owner_created_at, last_seq"
)
_HISTORY_COLUMNS = (
    "seq, turn, role, text, tool_call_id, tool_name, tool_kind, title, arguments_json, output,"
    " status, content_json, created_at"
)


def _record(r: Sequence[Any]) -> SessionRecord:
    return SessionRecord(
        session_id=r[0],
        agent_alias=r[1],
        workspace_dir=r[2],
        created_at=int(r[3]),
        last_activity=int(r[4]),
        token_count=int(r[5]),
        plan_json=r[6],
        state=r[7],
        lease_id=r[8],
        adapter_session_id=r[9],
        title=r[10],
        ownership=Ownership(
            session_key=r[11],
            spawned_by=r[12],
            parent_session_key=r[13],
            owner_session_key=r[14],
            agent_id=r[15],
            backend=r[16],
            gateway_instance_id=r[17],
            created_at=int(r[18]),
        ),
        message_count=int(r[19]),
    )


def _entry(r: Sequence[Any]) -> HistoryEntry:
    return HistoryEntry(
        seq=int(r[0]),
        turn=int(r[1]),
        role=r[2],
        text=r[3],
        tool_call_id=r[4],
        tool_name=r[5],
        tool_kind=r[6],
        title=r[7],
        arguments_json=r[8],
        output=r[9],
        status=r[10],
        content_json=r[11],
        created_at=int(r[12]),
    )


def _check_json(value: str, kind: type, what: str, index: int) -> None:
    if not value:
        return
    try:
        parsed = json.loads(value)
    except ValueError:
        raise InvalidItem(f"item {index}: {what} is not valid JSON") from None
    if not isinstance(parsed, kind):
        raise InvalidItem(f"item {index}: {what} must be a JSON {kind.__name__}")


def validate_item(item: HistoryEntry, index: int) -> None:
    """Refuse a malformed turn item with a message naming it (raises InvalidItem)."""
    if item.role not in ROLES:
        raise InvalidItem(f"item {index}: unknown role {item.role!r}")
    if item.role in ("tool_call", "tool_result") and not item.tool_call_id:
        raise InvalidItem(f"item {index}: {item.role} needs a tool_call_id")
    if item.role == "tool_call" and not item.tool_name:
        raise InvalidItem(f"item {index}: tool_call needs a tool_name")
    if item.status not in TOOL_STATUSES:
        raise InvalidItem(f"item {index}: unknown status {item.status!r}")
    _check_json(item.arguments_json, dict, "arguments_json", index)
    _check_json(item.content_json, list, "content_json", index)


def _check_plan(plan_json: str | None) -> None:
    if plan_json:
        try:
            json.loads(plan_json)
        except ValueError:
            raise InvalidItem("plan_json is not valid JSON") from None


class SessionStore:
    """Session rows and history on one aiosqlite connection.

    Calls are serialized on the connection by an asyncio lock, so a transaction
    is never interleaved with another coroutine's statements; other processes
    (other connections to the same file) are serialized by SQLite's own locks.
    """

    def __init__(self, db: aiosqlite.Connection, status: StoreStatusInfo, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._lock = asyncio.Lock()
        self._closed = False
        self.status = status

    @property
    def persistent(self) -> bool:
        """True when rows live in the SQLite file."""
        return self.status.persistent

    async def close(self) -> None:
        """Close the connection (checkpointing WAL); a second call does nothing."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            await self._db.close()

    # -- helpers

    async def _fetch_session(self, session_id: str) -> SessionRecord | None:
        async with self._db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        return _record(row) if row else None

    async def _write(self, sql: str, params: Sequence[Any]) -> int:
        """One statement in its own IMMEDIATE transaction; returns the changed row count."""
        async with _immediate(self._db):
            cur = await self._db.execute(sql, params)
            count = cur.rowcount
        return count

    # -- sessions

    async def create_session(
        self,
        session_id: str,
        agent_alias: str,
        workspace_dir: str,
        *,
        spawned_by: str = "",
        parent_session_key: str = "",
        owner_session_key: str = "",
        gateway_instance_id: str = "",
        state: str = "active",
    ) -> SessionRecord:
        """Write a new row with SPEC §13 ownership; owner defaults to spawned_by, else itself."""
        if not session_id or not agent_alias or not workspace_dir:
            raise InvalidItem("session_id, agent_alias and workspace_dir are required")
        if state not in STATES:
            raise InvalidItem(f"unknown state {state!r}")
        now = self._clock()
        key = session_key_for(agent_alias, session_id)
        owner = owner_session_key or spawned_by or key
        async with self._lock:
            try:
                await self._write(
                    "INSERT INTO sessions (id, agent_alias, workspace_dir, created_at,"
                    " last_activity, state, session_key, spawned_by, parent_session_key,"
                    " owner_session_key, agent_id, backend, gateway_instance_id, owner_created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session_id, agent_alias, workspace_dir, now, now, state, key, spawned_by,
                     parent_session_key, owner, agent_alias, BACKEND, gateway_instance_id, now),
                )
            except sqlite3.IntegrityError:
                raise SessionExists(f"Session already exists: {session_id}") from None
            rec = await self._fetch_session(session_id)
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
        async with self._lock, self._db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_key = ? LIMIT 1",
            (session_key,),
        ) as cur:
            row = await cur.fetchone()
        return _record(row) if row else None

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
    ) -> SessionRecord:
        """Change the given fields (None = unchanged). Legacy rows get their ownership on
        the first alias they are bound to."""
        if state is not None and state not in STATES:
            raise InvalidItem(f"unknown state {state!r}")
        if agent_alias is not None and not agent_alias:
            raise InvalidItem("agent_alias must not be empty")
        _check_plan(plan_json)
        sets: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("state", state),
            ("lease_id", lease_id),
            ("adapter_session_id", adapter_session_id),
            ("plan_json", plan_json),
            ("agent_alias", agent_alias),
            ("title", None if title is None else make_title(title)),
        ):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(value)
        if agent_alias:
            key = session_key_for(agent_alias, session_id)
            sets.append("session_key = CASE WHEN session_key = '' THEN ? ELSE session_key END")
            sets.append("agent_id = CASE WHEN agent_id = '' THEN ? ELSE agent_id END")
            sets.append(
                "owner_session_key = CASE WHEN owner_session_key = '' THEN ? "
                "ELSE owner_session_key END"
            )
            params += [key, agent_alias, key]
        async with self._lock:
            if sets:
                changed = await self._write(
                    f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", [*params, session_id]
                )
                if changed == 0:
                    raise SessionNotFound(session_id)
            rec = await self._fetch_session(session_id)
        if rec is None:
            raise SessionNotFound(session_id)
        return rec

    async def touch(self, session_id: str) -> SessionRecord:
        """Bump last_activity to now (never backwards)."""
        now = self._clock()
        async with self._lock:
            changed = await self._write(
                "UPDATE sessions SET last_activity = MAX(last_activity, ?) WHERE id = ?",
                (now, session_id),
            )
            if changed == 0:
                raise SessionNotFound(session_id)
            rec = await self._fetch_session(session_id)
        assert rec is not None
        return rec

    async def list_sessions(
        self, *, cwd: str = "", after: tuple[int, str] | None = None, limit: int = 100
    ) -> list[SessionRecord]:
        """One page of rows, newest activity first, strictly after the ``after`` position."""
        where: list[str] = []
        params: list[Any] = []
        if cwd:
            where.append("workspace_dir = ?")
            params.append(cwd)
        if after is not None:
            where.append("(last_activity < ? OR (last_activity = ? AND id < ?))")
            params += [after[0], after[0], after[1]]
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        async with self._lock, self._db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions {clause}"
            " ORDER BY last_activity DESC, id DESC LIMIT ?",
            [*params, limit],
        ) as cur:
            return [_record(r) async for r in cur]

    # -- history

    async def append_turn(
        self,
        session_id: str,
        items: Sequence[HistoryEntry],
        *,
        token_delta: int = 0,
        plan_json: str | None = None,
    ) -> AppendResult:
        """Append one completed turn in one transaction: every item or none (SPEC §8).

        Items are validated as they are written, so a bad item after good ones
        proves the rollback; an unknown session rolls back too.
        """
        if not items:
            raise InvalidItem("a turn needs at least one item")
        if token_delta < 0:
            raise InvalidItem("token_delta must not be negative")
        _check_plan(plan_json)
        now = self._clock()
        async with self._lock, _immediate(self._db):
            async with self._db.execute(
                "SELECT last_seq, last_turn, title FROM sessions WHERE id = ?", (session_id,)
            ) as cur:
                row = await cur.fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            seq, turn, title = int(row[0]), int(row[1]) + 1, str(row[2])
            first = seq + 1
            for index, item in enumerate(items):
                validate_item(item, index)
                seq += 1
                await self._db.execute(
                    f"INSERT INTO history (session_id, {_HISTORY_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session_id, seq, turn, item.role, item.text, item.tool_call_id,
                     item.tool_name, item.tool_kind, item.title, item.arguments_json,
                     item.output, item.status, item.content_json, now),
                )
                if not title and item.role == "user" and item.text.strip():
                    title = make_title(item.text)
            await self._db.execute(
                "UPDATE sessions SET last_seq = ?, last_turn = ?, title = ?,"
                " token_count = token_count + ?, last_activity = MAX(last_activity, ?),"
                " plan_json = COALESCE(?, plan_json) WHERE id = ?",
                (seq, turn, title, token_delta, now, plan_json, session_id),
            )
        return AppendResult(turn=turn, first_seq=first, last_seq=seq)

    async def iter_history(
        self, session_id: str, *, after_seq: int = 0, page: int = _PAGE
    ) -> AsyncIterator[HistoryEntry]:
        """The stored items oldest first, read in pages (SessionNotFound if no such row)."""
        async for rows in self.iter_history_pages(session_id, after_seq=after_seq, page=page):
            for entry in rows:
                yield entry

    async def iter_history_pages(
        self, session_id: str, *, after_seq: int = 0, page: int = _PAGE
    ) -> AsyncIterator[list[HistoryEntry]]:
        """The stored items oldest first as the store reads them: one non-empty list of at
        most ``page`` items per query (SessionNotFound if no such row)."""
        await self.get_session(session_id)
        last = after_seq
        while True:
            async with self._lock, self._db.execute(
                f"SELECT {_HISTORY_COLUMNS} FROM history WHERE session_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (session_id, last, page),
            ) as cur:
                rows = [_entry(r) async for r in cur]
            if rows:
                yield rows
            if len(rows) < page:
                return
            last = rows[-1].seq
