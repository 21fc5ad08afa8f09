"""Opening the session store: SQLite or PostgreSQL, or memory when neither can be used.

- No ``[store] url``: ``<data dir>/sessions/acp-sessions.db`` is the store
  (SPEC §8). If that file cannot be used — a read-only dir, ``sessions`` is a
  file, a corrupt or newer-schema file — the file is left as it was.
- A ``postgresql://`` URL (a :class:`~.pg_db.PostgresTarget`): a pool on that
  database, migrated as needed. If the server does not answer within the
  target's connect timeout, refuses the login, or holds a newer schema, the
  database is left as it was.

Either way the service still starts (SPEC §2): the
:class:`~.sqlite_store.SqliteSessionStore` runs on an in-memory SQLite
database, and its :attr:`~.interface.SessionStore.status` says why — in words
that never include a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import aiosqlite
import asyncpg

from services.common.logs import get_logger
from services.session.store.interface import Clock, SessionStore, wall_clock_ms
from services.session.store.pg_db import PostgresTarget, create_pool, describe
from services.session.store.pg_schema import migrate as migrate_pg
from services.session.store.pg_store import PostgresSessionStore
from services.session.store.records import StoreError, StoreStatusInfo
from services.session.store.sqlite_db import MEMORY, connect, prepare_file
from services.session.store.sqlite_schema import migrate
from services.session.store.sqlite_store import SqliteSessionStore

__all__ = ["StoreTarget", "open_store"]

log = get_logger("session.store")

#: What to open: the SQLite file, a PostgreSQL database, or ``None`` (memory).
StoreTarget = Path | PostgresTarget | None


async def _open_file(db_path: Path, clock: Clock) -> SessionStore:
    """The store on the file (created and migrated as needed); StoreError, sqlite3.Error
    or OSError when it cannot be used, with no connection left open."""
    db: aiosqlite.Connection | None = None
    try:
        await asyncio.to_thread(prepare_file, db_path)
        db = await connect(str(db_path))
        version = await migrate(db, clock())
    except BaseException:
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                await db.close()
        raise
    log.info("session_store_opened", db_path=str(db_path), schema_version=version)
    return SqliteSessionStore(db, StoreStatusInfo(True, str(db_path), "", version), clock)


async def _open_postgres(target: PostgresTarget, clock: Clock) -> SessionStore:
    """The store on the database (migrated as needed); the driver's error, StoreError or
    OSError when it cannot be used, with no connection left open."""
    pool = await create_pool(target)
    try:
        async with pool.acquire() as con:
            version = await migrate_pg(con)
    except BaseException:
        await pool.close()
        raise
    log.info("session_store_opened", backend="postgresql", url=target.shown,
             schema_version=version)
    status = StoreStatusInfo(True, target.shown, "", version, backend="postgresql")
    return PostgresSessionStore(pool, status, clock)


async def _open_memory(reason: str, clock: Clock) -> SessionStore:
    """The fallback: a fresh in-memory database, not persistent, saying ``reason``."""
    db = await connect(MEMORY)
    version = await migrate(db, clock())
    return SqliteSessionStore(db, StoreStatusInfo(False, "", reason, version), clock)


async def open_store(target: StoreTarget, *, clock: Clock = wall_clock_ms) -> SessionStore:
    """Open the store ``target`` names, falling back to memory on failure.

    Never raises for a bad file or an unreachable database: the reason is in
    :attr:`SessionStore.status`.
    """
    if target is None:
        return await _open_memory("no database path configured", clock)
    if isinstance(target, PostgresTarget):
        try:
            return await _open_postgres(target, clock)
        except (StoreError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
                TimeoutError) as exc:
            reason = f"{target.shown}: {describe(exc)}"
        log.warning("session_store_memory_fallback", url=target.shown, reason=reason)
        return await _open_memory(reason, clock)
    try:
        return await _open_file(target, clock)
    except (StoreError, sqlite3.Error, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, sqlite3.Error):
            reason = f"{target}: {reason}"
        log.warning("session_store_memory_fallback", db_path=str(target), reason=reason)
    return await _open_memory(reason, clock)
