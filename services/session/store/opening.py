"""Opening the session store: the SQLite file, or memory when the file cannot be used.

``<data dir>/sessions/acp-sessions.db`` is the store (SPEC §8). If that file
cannot be used — a read-only dir, ``sessions`` is a file, a corrupt or
newer-schema file — the service still starts (SPEC §2): the same
:class:`~.sqlite_store.SqliteSessionStore` runs on an in-memory SQLite
database, and its :attr:`~.interface.SessionStore.status` says why. The file is
left as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import aiosqlite

from services.common.logs import get_logger
from services.session.store.interface import Clock, SessionStore, wall_clock_ms
from services.session.store.records import StoreError, StoreStatusInfo
from services.session.store.sqlite_db import MEMORY, connect, prepare_file
from services.session.store.sqlite_schema import migrate
from services.session.store.sqlite_store import SqliteSessionStore

__all__ = ["open_store"]

log = get_logger("session.store")


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


async def _open_memory(reason: str, clock: Clock) -> SessionStore:
    """The fallback: a fresh in-memory database, not persistent, saying ``reason``."""
    db = await connect(MEMORY)
    version = await migrate(db, clock())
    return SqliteSessionStore(db, StoreStatusInfo(False, "", reason, version), clock)


async def open_store(db_path: Path | None, *, clock: Clock = wall_clock_ms) -> SessionStore:
    """Open the store at ``db_path`` (``None`` = memory), falling back to memory on failure.

    Never raises for a bad file: the reason is in :attr:`SessionStore.status`.
    """
    if db_path is None:
        return await _open_memory("no database path configured", clock)
    try:
        return await _open_file(db_path, clock)
    except (StoreError, sqlite3.Error, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, sqlite3.Error):
            reason = f"{db_path}: {reason}"
        log.warning("session_store_memory_fallback", db_path=str(db_path), reason=reason)
    return await _open_memory(reason, clock)
