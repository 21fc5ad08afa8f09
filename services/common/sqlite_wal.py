"""Switching a SQLite connection to WAL when other processes open the same file.

Several acpgate processes open one database at once (two ``acpgate acp`` and an
``acpgate serve`` on one data dir share the session store and the lease store).
Switching a fresh file to WAL needs an exclusive lock that SQLite does not wait
for through ``busy_timeout`` when another connection is switching the same file:
"database is locked" at once. So the switch is retried, with backoff, within a
budget, like any busy wait.
"""

from __future__ import annotations

import asyncio
import sqlite3

import aiosqlite

__all__ = ["switch_to_wal"]


async def switch_to_wal(db: aiosqlite.Connection, budget_secs: float) -> object:
    """``PRAGMA journal_mode = WAL`` on ``db``, retried while busy for up to
    ``budget_secs``; the journal mode it reports (None if none)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_secs
    delay = 0.002
    while True:
        try:
            async with db.execute("PRAGMA journal_mode = WAL") as cur:
                row = await cur.fetchone()
            return row[0] if row else None
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or loop.time() >= deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)
