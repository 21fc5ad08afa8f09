"""Opening the session store: SQLite or PostgreSQL; memory only when neither can be made.

- No ``[store] url``: ``<data dir>/sessions/acp-sessions.db`` is the store
  (SPEC §8), its WAL checkpointed in the background (:mod:`.sqlite.checkpoint`). A
  file that exists but cannot be used — damaged, not a database,
  of a newer schema, unreadable — is refused (:class:`~.unusable.StoreUnusable`,
  the file left as it was): the service does not start on it. Only when the file
  does not exist and cannot be created (a read-only dir, ``sessions`` is a
  file) does the store run in memory (SPEC §2).
- A ``postgresql://`` URL (a :class:`~.postgres.db.PostgresTarget`): a pool on that
  database, migrated as needed. A database that answers with a schema this
  acpgate cannot use (a newer one, someone else's tables) is refused the same
  way; one that does not answer within the target's connect timeout, or refuses
  the login, leaves the store in memory.

In memory, the :class:`~.sqlite.store.SqliteSessionStore` runs on an in-memory
SQLite database, and its :attr:`~.interface.SessionStore.status` says why — in
words that never include a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import stat
from pathlib import Path

import aiosqlite
import asyncpg

from services.common.logs import get_logger
from services.session.store.interface import Clock, SessionStore, wall_clock_ms
from services.session.store.postgres.db import PostgresTarget, create_pool, describe
from services.session.store.postgres.liveness import HostLiveness, connector
from services.session.store.postgres.schema import migrate as migrate_pg
from services.session.store.postgres.store import PostgresSessionStore
from services.session.store.records import SchemaTooNew, StoreError, StoreStatusInfo
from services.session.store.sqlite.checkpoint import take_over
from services.session.store.sqlite.db import MEMORY, connect, prepare_file
from services.session.store.sqlite.schema import migrate
from services.session.store.sqlite.store import SqliteSessionStore
from services.session.store.unusable import StoreUnusable

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
        checkpointer = await take_over(db, db_path)
    except BaseException:
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                await db.close()
        raise
    log.info("session_store_opened", db_path=str(db_path), schema_version=version)
    return SqliteSessionStore(db, StoreStatusInfo(True, str(db_path), "", version), clock,
                              checkpointer)


async def _open_postgres(target: PostgresTarget, clock: Clock) -> SessionStore:
    """The store on the database (migrated as needed); the driver's error, StoreError or
    OSError when it cannot be reached, StoreUnusable when it answers with a schema this
    acpgate cannot use; no connection left open."""
    pool = await create_pool(target)
    try:
        async with pool.acquire() as con:
            version = await migrate_pg(con)
    except (StoreError, asyncpg.PostgresError) as exc:
        await pool.close()
        raise StoreUnusable(target.shown, describe(exc), backend="postgresql",
                            newer=isinstance(exc, SchemaTooNew)) from None
    except BaseException:
        await pool.close()
        raise
    log.info("session_store_opened", backend="postgresql", url=target.shown,
             schema_version=version)
    status = StoreStatusInfo(True, target.shown, "", version, backend="postgresql")
    return PostgresSessionStore(pool, status, clock,
                                HostLiveness(connector(target), target.shown))


async def _open_memory(reason: str, clock: Clock) -> SessionStore:
    """The fallback: a fresh in-memory database, not persistent, saying ``reason``."""
    db = await connect(MEMORY)
    version = await migrate(db, clock())
    return SqliteSessionStore(db, StoreStatusInfo(False, "", reason, version), clock)


def _holds_a_store(db_path: Path) -> bool:
    """Whether something is at ``db_path`` that may hold sessions (an empty file holds
    none; a directory or a socket there cannot be created over either)."""
    try:
        st = db_path.lstat()
    except OSError:
        return False  # missing, or its dir cannot be searched: nothing of ours to keep
    return not stat.S_ISREG(st.st_mode) or st.st_size > 0


async def open_store(target: StoreTarget, *, clock: Clock = wall_clock_ms) -> SessionStore:
    """Open the store ``target`` names; memory when it cannot be created or reached.

    Raises :class:`StoreUnusable` for a store that exists and cannot be used (the module
    doc); any other failure is in :attr:`SessionStore.status` of the memory store.
    """
    if target is None:
        return await _open_memory("no database path configured", clock)
    if isinstance(target, PostgresTarget):
        try:
            return await _open_postgres(target, clock)
        except StoreUnusable as exc:
            log.error("session_store_unusable", url=target.shown, reason=exc.reason)
            raise
        except (StoreError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
                TimeoutError) as exc:
            reason = f"{target.shown}: {describe(exc)}"
        log.warning("session_store_memory_fallback", url=target.shown, reason=reason)
        return await _open_memory(reason, clock)
    existed = await asyncio.to_thread(_holds_a_store, target)
    try:
        return await _open_file(target, clock)
    except (StoreError, sqlite3.Error, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        if existed:
            why = reason.replace(str(target), "the file").removesuffix(" (left untouched)")
            log.error("session_store_unusable", db_path=str(target), reason=why)
            raise StoreUnusable(str(target), why,
                                newer=isinstance(exc, SchemaTooNew)) from None
        if isinstance(exc, sqlite3.Error):
            reason = f"{target}: {reason}"
        log.warning("session_store_memory_fallback", db_path=str(target), reason=reason)
    return await _open_memory(reason, clock)
