"""The ``legacy_records`` table of the lease database: imported pre-lease records and
what became of each.

One row per imported record (:mod:`services.lifecycle.reaping.legacy_files`), unique by its
file's content digest and its line, so importing the same file again adds nothing. A
row is pending until processed, then closed, lost or left with the reason
(:class:`~services.lifecycle.reaping.legacy.LegacyState`) and never processed again. Only the
service holding slot 0 opens the table, at its start (:mod:`services.lifecycle.startup.legacy_records`),
on a connection of its own to ``leases.db`` (the lease store's file, its locks and WAL).
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from services.lifecycle.leases.store import BUSY_TIMEOUT_MS
from services.lifecycle.reaping.legacy import LegacyCloseResult, LegacyRecord, LegacyState
from services.lifecycle.reaping.legacy_files import LegacyFile

__all__ = ["LegacyRow", "LegacyStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS legacy_records (
    record_id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    source_digest TEXT NOT NULL,
    line INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    command TEXT NOT NULL,
    wrapper_root TEXT NOT NULL,
    expects_wrapper INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    imported_at INTEGER NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    processed_at INTEGER NOT NULL DEFAULT 0,
    terminated_pids TEXT NOT NULL DEFAULT '[]',
    surviving_pids TEXT NOT NULL DEFAULT '[]',
    UNIQUE (source_digest, line)
);
CREATE INDEX IF NOT EXISTS legacy_records_state ON legacy_records (state);
"""

_COLUMNS = ("record_id, source, line, pid, command, wrapper_root, expects_wrapper, started_at,"
            " imported_at, state, reason, processed_at, terminated_pids, surviving_pids")


@dataclass(frozen=True)
class LegacyRow:
    """One imported record as stored, with its outcome once processed."""

    record_id: int
    source: str
    line: int
    pid: int
    command: str
    wrapper_root: str
    expects_wrapper: bool
    started_at: int
    imported_at: int
    state: LegacyState
    reason: str = ""
    processed_at: int = 0
    terminated_pids: tuple[int, ...] = ()
    surviving_pids: tuple[int, ...] = ()

    def record(self) -> LegacyRecord:
        """The record to verify (no birth identity: the files keep none)."""
        return LegacyRecord(pid=self.pid, command=self.command, wrapper_root=self.wrapper_root,
                            expects_wrapper=self.expects_wrapper)


def _row(values: tuple[Any, ...]) -> LegacyRow:
    (record_id, source, line, pid, command, wrapper_root, expects_wrapper, started_at,
     imported_at, state, reason, processed_at, terminated, surviving) = values
    return LegacyRow(
        int(record_id), str(source), int(line), int(pid), str(command), str(wrapper_root),
        bool(expects_wrapper), int(started_at), int(imported_at), LegacyState(state),
        str(reason), int(processed_at), tuple(json.loads(terminated)),
        tuple(json.loads(surviving)),
    )


class LegacyStore:
    """Async access to the ``legacy_records`` table; :meth:`open`, then :meth:`close`."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: Path) -> LegacyStore:
        """A connection to the lease database at ``path`` (already made by the lease
        store: private, WAL), the table created if needed."""
        db = await aiosqlite.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await db.execute("PRAGMA synchronous=FULL")  # an outcome is on disk before the next
            await db.executescript(_SCHEMA)
            await db.commit()
        except BaseException:
            await db.close()
            raise
        return cls(db)

    async def close(self) -> None:
        """Close the connection."""
        await self._db.close()

    async def import_file(self, file: LegacyFile, now_ms: int) -> int:
        """Add ``file``'s records as pending, in one transaction; how many were new."""
        rows = [
            (file.path.name, file.digest, r.line, r.pid, r.command, r.wrapper_root,
             int(r.expects_wrapper), r.started_at, now_ms, str(LegacyState.PENDING))
            for r in file.records
        ]
        try:
            cur = await self._db.executemany(
                "INSERT OR IGNORE INTO legacy_records (source, source_digest, line, pid, command,"
                " wrapper_root, expects_wrapper, started_at, imported_at, state)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            added = max(cur.rowcount, 0)
            await self._db.commit()
        except BaseException:
            await self._db.rollback()
            raise
        return added

    async def list(self, *, states: tuple[LegacyState, ...] = ()) -> builtins.list[LegacyRow]:
        """The records in one of ``states`` (all when empty), in import order."""
        sql = f"SELECT {_COLUMNS} FROM legacy_records"
        args = [str(s) for s in states]
        if args:
            sql += f" WHERE state IN ({', '.join('?' for _ in args)})"
        rows = await self._db.execute_fetchall(sql + " ORDER BY record_id", args)
        return [_row(tuple(r)) for r in rows]

    async def finish(self, row: LegacyRow, result: LegacyCloseResult, now_ms: int) -> bool:
        """Store where a pending record ended and why (durable); False when it was not
        pending any more (nothing changed)."""
        cur = await self._db.execute(
            "UPDATE legacy_records SET state = ?, reason = ?, processed_at = ?,"
            " terminated_pids = ?, surviving_pids = ? WHERE record_id = ? AND state = ?",
            (str(result.state), result.unverified_reason, now_ms,
             json.dumps(list(result.terminated_pids)), json.dumps(list(result.surviving_pids)),
             row.record_id, str(LegacyState.PENDING)))
        changed = cur.rowcount > 0
        await self._db.commit()
        return changed
