"""The lease store: one durable record per wrapper spawn (SPEC §13).

``<data dir>/lifecycle/leases.db`` (aiosqlite, WAL, ``synchronous=FULL``). A
lease is inserted *before* the spawn with ``root_pid = 0`` (pending), completed
once the wrapper runs, and moved open → closing → closed | lost. A warm
pool's lease starts as warm instead of open and becomes open when a session
takes it (warm → closing when the pool retires it). State changes are
compare-and-set updates, and :meth:`LeaseStore.lock` serializes whole
transitions of one lease (close, reap) inside this process. Closed and lost
leases expire after the retention period, so the file stays bounded.

Several lifecycle services share the file: every acpgate process on one data dir
holds its own instance slot (:mod:`services.lifecycle.leases.instance_slots`) and writes only its
slot's leases, while SQLite's locks order the writes of all of them. Both
connections wait for another process's write lock (``busy_timeout``), the switch
to WAL is retried while another process makes it, and a write transaction's first
statement takes the write lock before it reads anything, so no transaction ever
has to upgrade a stale read (which SQLite answers "busy" at once).

Every write is durable (``synchronous=FULL``: one fsync per commit) unless the
caller says ``durable=False``: only for a change a power cut may lose because
the processes it describes die with the machine and the startup reap treats
both versions alike (a warm lease taken by a session). Those go through a second
connection that never syncs (``synchronous=NORMAL``, autocommit), so a relaxed
update is one statement and one hop to its thread, and never changes the sync
level of the durable connection.
"""

from __future__ import annotations

import asyncio
import builtins
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import aiosqlite

from services.common.private_files import private_dir, private_file
from services.common.sqlite_wal import switch_to_wal


class LeaseState(enum.StrEnum):
    """Where a lease is in its life."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    LOST = "lost"
    #: Spawned by a warm pool, waiting for a session (never attachable).
    WARM = "warm"


ENDED_STATES = (LeaseState.CLOSED, LeaseState.LOST)
#: The states a close starts from (they move to closing first).
HELD_STATES = (LeaseState.OPEN, LeaseState.WARM)
LIVE_STATES = (LeaseState.OPEN, LeaseState.CLOSING, LeaseState.WARM)
#: How long a statement waits for another process's write lock on the file.
BUSY_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class LeaseRecord:
    """One lease (the seed's ``AcpxProcessLease`` plus birth identity and exit)."""

    lease_id: str
    gateway_instance_id: str
    session_key: str
    wrapper_root: str
    wrapper_path: str
    command_hash: str
    started_at: int
    state: LeaseState = LeaseState.OPEN
    #: The wrapper's PID; 0 = pending (written before the spawn).
    root_pid: int = 0
    #: Birth identity of the root (start time in clock ticks); 0 while pending.
    root_start_time: int = 0
    process_group_id: int | None = None
    adapter_pid: int = 0
    ended_at: int = 0
    exit_code: int | None = None
    exit_signal: int | None = None

    @property
    def pending(self) -> bool:
        """True while the spawn has not been recorded (root PID unknown)."""
        return self.root_pid == 0


_COLUMNS = [f.name for f in fields(LeaseRecord)]
_SELECTED = ", ".join(_COLUMNS)
_SELECT_ONE = f"SELECT {_SELECTED} FROM leases WHERE lease_id = ?"
#: Ids per ``IN (...)`` query, well under SQLite's bound-parameter limit.
_IN_CHUNK = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    lease_id TEXT PRIMARY KEY,
    gateway_instance_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    wrapper_root TEXT NOT NULL,
    wrapper_path TEXT NOT NULL,
    command_hash TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    state TEXT NOT NULL,
    root_pid INTEGER NOT NULL DEFAULT 0,
    root_start_time INTEGER NOT NULL DEFAULT 0,
    process_group_id INTEGER,
    adapter_pid INTEGER NOT NULL DEFAULT 0,
    ended_at INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    exit_signal INTEGER
);
CREATE INDEX IF NOT EXISTS leases_state ON leases (gateway_instance_id, state);
CREATE INDEX IF NOT EXISTS leases_session ON leases (session_key, state);
"""


def _row_to_record(row: Sequence[Any]) -> LeaseRecord:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["state"] = LeaseState(values["state"])
    return LeaseRecord(**values)


class LeaseStore:
    """Async access to ``leases.db``; open with :meth:`open`, end with :meth:`close`."""

    def __init__(self, db: aiosqlite.Connection, path: Path,
                 relaxed: aiosqlite.Connection) -> None:
        self._db = db
        #: The connection of ``durable=False`` writes (no fsync, autocommit).
        self._relaxed = relaxed
        self.path = path
        self._locks: dict[str, asyncio.Lock] = {}
        #: Serializes writes, so a relaxed commit never lends its sync level to another.
        self._write = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> LeaseStore:
        """Open (creating if needed, owner-only) the store at ``path``."""
        await asyncio.to_thread(_private_db, path)
        db = await aiosqlite.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
        relaxed: aiosqlite.Connection | None = None
        try:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await switch_to_wal(db, BUSY_TIMEOUT_MS / 1000)
            # FULL: a lease must be on disk before the spawn it describes.
            await db.execute("PRAGMA synchronous=FULL")
            await db.executescript(_SCHEMA)
            await db.commit()
            relaxed = await aiosqlite.connect(str(path), isolation_level=None,
                                              timeout=BUSY_TIMEOUT_MS / 1000)
            await relaxed.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await relaxed.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            if relaxed is not None:
                await relaxed.close()
            await db.close()
            raise
        return cls(db, path, relaxed)

    async def close(self) -> None:
        """Close both database connections."""
        await self._relaxed.close()
        await self._db.close()

    def lock(self, lease_id: str) -> asyncio.Lock:
        """The lock serializing transitions of one lease."""
        lock = self._locks.get(lease_id)
        if lock is None:
            lock = self._locks[lease_id] = asyncio.Lock()
        return lock

    async def insert(self, lease: LeaseRecord) -> LeaseRecord:
        """Write a new lease durably (committed before returning)."""
        placeholders = ", ".join("?" for _ in _COLUMNS)
        values = [getattr(lease, c) for c in _COLUMNS]
        values[_COLUMNS.index("state")] = str(lease.state)
        async with self._write:
            await self._db.execute(
                f"INSERT INTO leases ({', '.join(_COLUMNS)}) VALUES ({placeholders})", values
            )
            await self._db.commit()
        return lease

    async def get(self, lease_id: str) -> LeaseRecord | None:
        """One lease by id."""
        # execute_fetchall: one hop to the connection's thread (execute, fetch and close
        # of a cursor are three); a warm take reads and writes its lease on the critical path.
        rows = list(await self._db.execute_fetchall(_SELECT_ONE, (lease_id,)))
        return _row_to_record(rows[0]) if rows else None

    async def list(
        self,
        *,
        states: Iterable[LeaseState] = (),
        session_key: str = "",
        instance_id: str = "",
    ) -> builtins.list[LeaseRecord]:
        """Leases filtered by state, session key and instance id, oldest first."""
        where: list[str] = []
        args: list[Any] = []
        state_list = [str(s) for s in states]
        if state_list:
            where.append(f"state IN ({', '.join('?' for _ in state_list)})")
            args.extend(state_list)
        if session_key:
            where.append("session_key = ?")
            args.append(session_key)
        if instance_id:
            where.append("gateway_instance_id = ?")
            args.append(instance_id)
        sql = f"SELECT {', '.join(_COLUMNS)} FROM leases"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at, lease_id"
        return [_row_to_record(r) for r in await self._db.execute_fetchall(sql, args)]

    async def instance_ids(self, states: Iterable[LeaseState]) -> set[str]:
        """The instance ids (slots) that have leases in one of ``states``."""
        state_list = [str(s) for s in states]
        rows = await self._db.execute_fetchall(
            "SELECT DISTINCT gateway_instance_id FROM leases"
            f" WHERE state IN ({', '.join('?' for _ in state_list)})", state_list)
        return {str(r[0]) for r in rows}

    async def update(
        self,
        lease_id: str,
        *,
        expect: Iterable[LeaseState] | None = None,
        durable: bool = True,
        **changes: Any,
    ) -> LeaseRecord | None:
        """Apply ``changes`` if the lease is in one of ``expect`` (all states if None).

        Returns the updated lease, or None when it does not exist or was in
        another state (the compare-and-set failed). ``durable=False`` commits
        without an fsync (see the module docstring for when that is allowed).
        """
        unknown = set(changes) - set(_COLUMNS)
        if unknown or "lease_id" in changes:
            raise ValueError(f"cannot update lease fields {sorted(unknown | {'lease_id'})}")
        if not changes:
            return await self.get(lease_id)
        sets = ", ".join(f"{k} = ?" for k in changes)
        args: list[Any] = [str(v) if isinstance(v, LeaseState) else v for v in changes.values()]
        sql = f"UPDATE leases SET {sets} WHERE lease_id = ?"
        args.append(lease_id)
        if expect is not None:
            expected = [str(s) for s in expect]
            sql += f" AND state IN ({', '.join('?' for _ in expected)})"
            args.extend(expected)
        # The changed row comes back from the update itself: no second read.
        sql = f"{sql} RETURNING {_SELECTED}"
        async with self._write:
            if durable:
                rows = list(await self._db.execute_fetchall(sql, args))
                await self._db.commit()
            else:  # one autocommitted statement on the connection that never syncs
                rows = list(await self._relaxed.execute_fetchall(sql, args))
        return _row_to_record(rows[0]) if rows else None

    async def transition(
        self,
        lease: LeaseRecord,
        to: LeaseState,
        *,
        now_ms: int = 0,
        **changes: Any,
    ) -> LeaseRecord | None:
        """Move ``lease`` from its current state to ``to`` (compare-and-set).

        Reaching closed or lost stamps ``ended_at`` with ``now_ms``.
        """
        if to in ENDED_STATES:
            changes.setdefault("ended_at", now_ms)
        return await self.update(lease.lease_id, expect=[lease.state], state=to, **changes)

    async def transition_many(
        self,
        moves: Sequence[tuple[LeaseRecord, LeaseState]],
        *,
        now_ms: int = 0,
    ) -> builtins.list[LeaseRecord | None]:
        """:meth:`transition` for many leases in ONE transaction (one commit, one fsync).

        Each move is its own compare-and-set against the lease's current state; the
        result is in ``moves`` order, None where that lease was gone or in another
        state. Either every successful move is durable or none is. Callers hold the
        leases' locks, like for :meth:`transition`.
        """
        if not moves:
            return []
        moved: builtins.list[bool] = []
        async with self._write:
            try:
                for lease, to in moves:
                    ended_at = now_ms if to in ENDED_STATES else None
                    cur = await self._db.execute(
                        "UPDATE leases SET state = ?, ended_at = COALESCE(?, ended_at)"
                        " WHERE lease_id = ? AND state = ?",
                        (str(to), ended_at, lease.lease_id, str(lease.state)),
                    )
                    moved.append(cur.rowcount > 0)
                await self._db.commit()
            except BaseException:
                await self._db.rollback()
                raise
        fresh = await self._get_many([lease.lease_id for (lease, _), ok in zip(moves, moved, strict=True) if ok])
        return [fresh.get(lease.lease_id) if ok else None
                for (lease, _), ok in zip(moves, moved, strict=True)]

    async def _get_many(self, lease_ids: Sequence[str]) -> dict[str, LeaseRecord]:
        out: dict[str, LeaseRecord] = {}
        for start in range(0, len(lease_ids), _IN_CHUNK):
            chunk = lease_ids[start:start + _IN_CHUNK]
            async with self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM leases"
                f" WHERE lease_id IN ({', '.join('?' for _ in chunk)})",
                chunk,
            ) as cur:
                for row in await cur.fetchall():
                    rec = _row_to_record(row)
                    out[rec.lease_id] = rec
        return out

    async def expire(self, now_ms: int, retention_secs: int) -> builtins.list[str]:
        """Delete closed/lost leases that ended more than the retention ago; their ids."""
        cutoff = now_ms - retention_secs * 1000
        async with self._db.execute(
            "SELECT lease_id FROM leases WHERE state IN (?, ?) AND ended_at < ?",
            (str(LeaseState.CLOSED), str(LeaseState.LOST), cutoff),
        ) as cur:
            ids = [str(r[0]) for r in await cur.fetchall()]
        if ids:
            async with self._write:
                await self._db.execute(
                    "DELETE FROM leases WHERE state IN (?, ?) AND ended_at < ?",
                    (str(LeaseState.CLOSED), str(LeaseState.LOST), cutoff),
                )
                await self._db.commit()
            for lease_id in ids:
                self._locks.pop(lease_id, None)
        return ids


def _private_db(path: Path) -> None:
    """The lease database and its dir, owner-only: leases name the processes acpgate may
    signal. Blocking."""
    private_dir(path.parent)
    private_file(path, sqlite=True)
