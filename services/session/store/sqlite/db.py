"""SQLite plumbing of the session store: the file check, the connection, the transaction.

A file that is not a SQLite database is refused before it is opened, so it is
never overwritten; a connection gets the SPEC §8 settings (WAL, a busy timeout,
foreign keys on) and autocommit, so a single statement is its own transaction and
several go in an explicit ``BEGIN IMMEDIATE`` taken by :func:`immediate` — or, for a
hot one, by a function run whole on the connection's thread (:func:`in_connection`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import aiosqlite

from services.common.private_files import private_dir, private_file
from services.common.sqlite_wal import switch_to_wal
from services.session.store.records import StoreError

__all__ = ["BUSY_TIMEOUT_MS", "MEMORY", "SQLITE_HEADER", "connect", "immediate", "in_connection",
           "prepare_file"]

T = TypeVar("T")

BUSY_TIMEOUT_MS: Final = 10_000
SQLITE_HEADER: Final = b"SQLite format 3\x00"
#: The target of an in-memory database.
MEMORY: Final = ":memory:"


def prepare_file(db_path: Path) -> None:
    """Create the parent dir; refuse anything that must not be opened (blocking; off-loop)."""
    parent = db_path.parent
    if parent.exists() and not parent.is_dir():
        raise StoreError(f"{parent} exists and is not a directory")
    try:
        private_dir(parent)  # conversations: the owner's alone
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
    try:
        private_file(db_path, sqlite=True)  # created 0600 before SQLite writes into it
    except OSError as exc:
        raise StoreError(f"cannot create {db_path}: {exc.strerror or exc}") from None


async def connect(target: str) -> aiosqlite.Connection:
    """A connection to ``target`` (a path or :data:`MEMORY`) with the store's settings; a
    file must pass ``quick_check`` and switch to WAL, else StoreError (the file is left)."""
    db = await aiosqlite.connect(target, isolation_level=None)
    try:
        await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA foreign_keys = ON")
        if target != MEMORY:
            async with db.execute("PRAGMA quick_check") as cur:
                row = await cur.fetchone()
            if not row or row[0] != "ok":
                raise StoreError(f"{target} failed its integrity check (left untouched)")
            mode = await switch_to_wal(db, BUSY_TIMEOUT_MS / 1000)
            if str(mode).lower() != "wal":
                raise StoreError(f"{target}: cannot switch to WAL mode")
            await db.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        await db.close()
        raise
    return db


@contextlib.asynccontextmanager
async def immediate(db: aiosqlite.Connection) -> AsyncIterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction: COMMIT at the end of the body, ROLLBACK if the
    body or the COMMIT raises (cancellation included)."""
    await db.execute("BEGIN IMMEDIATE")
    try:
        yield
        await db.execute("COMMIT")
    except BaseException:
        await db.execute("ROLLBACK")
        raise


async def in_connection(db: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """``fn(connection, *args)`` run on ``db``'s own thread, with its ``sqlite3`` connection:
    a transaction of many statements handed over once, instead of once per statement (each
    hand-over wakes the event loop; a batch of the event log is several). ``fn`` blocks
    that thread only; whatever it leaves open is the caller's to close in it."""
    # aiosqlite runs its own methods so; it has no public call for a whole function.
    return cast(T, await db._execute(fn, db._conn, *args))
