"""``acpgate store repair``: move a damaged store aside and keep what can still be read.

The damaged file is salvaged into a fresh store of the current schema, built beside it
as a private temporary file; then the damaged file (with its ``-wal``, ``-shm`` and
``-journal``, renamed alike so they stay a pair) is moved to
``<name>.damaged-<UTC timestamp>`` and the fresh store takes its name. What is read:

- each table's keys in key order, from the start and again from the end (so the keys
  on both sides of a bad page are kept), then each row by its key (a row whose content
  is lost costs that row only);
- then, with the ``sqlite3`` command-line shell on ``PATH``, what its ``.recover`` (a
  walk over every page it can parse, into a scratch database beside the store) finds
  besides.

Rows are copied by the columns both schemas share; a row that breaks a rule of the
fresh schema (its session lost, a bad value) is left out. Afterwards no session is
claimed or active (nothing runs while a repair does), and the sequence counters and
byte totals are computed again from the history that was kept.

Nothing is followed or written outside the store's own directory, which must be the
data dir's ``sessions``: a symbolic link, a FIFO or another user's file in place of the
store or of its side files refuses the repair. Blocking: run it off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services.common.private_files import (
    PRIVATE_FILE_MODE,
    SQLITE_SIDE_FILES,
    private_file,
    tighten,
)
from services.session.store.sqlite.db import connect
from services.session.store.sqlite.diagnosis import DAMAGED, Diagnosis, diagnose, read_only
from services.session.store.sqlite.schema import _V7_FENCE_AND_BYTES, migrate

__all__ = ["RepairRefused", "Repaired", "check_repairable", "repair_store", "salvage_into"]

#: The tables copied, parents first (history and usage need their session row).
_TABLES: Final = ("sessions", "history", "turn_usage", "event_chunks", "turns",
                  "agent_capabilities", "legacy_messages_v1")
#: The key each table is read in (row values compare in that order).
_KEYS: Final = {"history": ("session_id", "seq"), "turn_usage": ("session_id", "turn"),
                 "event_chunks": ("session_id", "first_event_id"),
                 "turns": ("session_id", "turn_id")}
#: How long the sqlite3 shell may take over one file.
RECOVER_TIMEOUT_SECS: Final = 600.0
#: Every claim and activity of the damaged store is void after a repair.
_RELEASE_CLAIMS: Final = (
    "UPDATE sessions SET state = 'inactive', lease_id = '', active_instance_id = '', "
    "active_host = '', active_until = 0, active_url = ''")
_COUNTERS: Final = (
    "UPDATE sessions SET "
    "last_seq = MAX(last_seq, COALESCE((SELECT MAX(seq) FROM history h "
    "WHERE h.session_id = sessions.id), 0)), "
    "last_turn = MAX(last_turn, COALESCE((SELECT MAX(turn) FROM history h "
    "WHERE h.session_id = sessions.id), 0))")


class RepairRefused(Exception):
    """The repair does not touch the store; the message says why."""


@dataclass(frozen=True)
class Repaired:
    """What a repair did."""

    moved_to: str
    #: How rows were read: "row by row", "sqlite3 .recover", both, or "nothing readable".
    method: str
    sessions: int
    history_items: int


def _own_regular(path: Path, *, required: bool) -> bool:
    """Whether ``path`` exists as a regular file of ours; RepairRefused for anything
    else standing there (a link, a FIFO, another user's file)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        if required:
            raise RepairRefused(f"{path} does not exist: there is nothing to repair") from None
        return False
    if stat.S_ISLNK(st.st_mode):
        raise RepairRefused(f"{path} is a symbolic link: acpgate repairs only its own file")
    if not stat.S_ISREG(st.st_mode):
        raise RepairRefused(f"{path} is not a regular file: move it away by hand")
    if st.st_uid != os.getuid():
        raise RepairRefused(f"{path} belongs to another user: acpgate repairs only its own "
                            "files")
    return True


def check_repairable(db_path: Path, data_dir: Path) -> Diagnosis:
    """The diagnosis of a store that may be repaired; RepairRefused when it must not be
    (not in ``<data dir>/sessions``, not our regular file) or need not be."""
    sessions_dir = data_dir / "sessions"
    if db_path.parent != sessions_dir or sessions_dir.is_symlink() \
            or os.path.realpath(sessions_dir) != os.path.join(os.path.realpath(data_dir),
                                                               "sessions"):
        raise RepairRefused(f"{db_path} is not a store in {sessions_dir}: acpgate repairs "
                            "only the store of its data dir")
    _own_regular(db_path, required=True)
    for suffix in SQLITE_SIDE_FILES:
        _own_regular(db_path.with_name(db_path.name + suffix), required=False)
    found = diagnose(db_path)
    if found.state != DAMAGED:
        reason = found.problem or f"it is intact (schema {found.schema_version}, " \
                                  f"{found.sessions} session(s))"
        raise RepairRefused(f"{db_path} needs no repair: {reason}")
    return found


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    with contextlib.suppress(sqlite3.Error):
        return [str(r[1]) for r in con.execute(f"PRAGMA table_info({table})")]
    return []


def _keys(con: sqlite3.Connection, table: str, keys: tuple[str, ...]) -> list[tuple[object, ...]]:
    """The keys of ``table`` that can be read: forward in key order until a read fails
    (resumed past the last key read while that still gets further), then backward from
    the end down to what the forward pass reached — the keys on both sides of a bad page."""
    keyed, marks = ", ".join(keys), ", ".join("?" * len(keys))

    def query(after: tuple[object, ...] | None, descending: bool) -> str:
        where = f" WHERE ({keyed}) > ({marks})" if after is not None else ""
        order = ", ".join(k + (" DESC" if descending else "") for k in keys)
        return f"SELECT {keyed} FROM {table}{where} ORDER BY {order}"

    found: list[tuple[object, ...]] = []
    while True:
        last = found[-1] if found else None
        try:
            for row in con.execute(query(last, False), last or ()):
                found.append(tuple(row))
            return found  # read to the end
        except sqlite3.Error:
            if (found[-1] if found else None) == last:
                break
    tail: list[tuple[object, ...]] = []
    with contextlib.suppress(sqlite3.Error):
        last = found[-1] if found else None
        for row in con.execute(query(last, True), last or ()):
            tail.append(tuple(row))
    return found + tail[::-1]


def _scan(con: sqlite3.Connection, table: str, cols: list[str]) -> Iterator[tuple[object, ...]]:
    """``table``'s readable rows (``cols`` of each): every key that can be read, then each
    row on its own, so a row whose content is lost costs that row only."""
    keys = _KEYS.get(table, ("rowid",))
    select = (f"SELECT {', '.join(cols)} FROM {table} "
              f"WHERE ({', '.join(keys)}) = ({', '.join('?' * len(keys))})")
    for key in _keys(con, table, keys):
        try:
            row = con.execute(select, key).fetchone()
        except sqlite3.Error:
            continue
        if row is not None:
            yield tuple(row)


def _recover_with_shell(source: Path, scratch: Path) -> bool:
    """``sqlite3 source .recover`` loaded into ``scratch``; False when there is no shell
    or it fails."""
    shell = shutil.which("sqlite3")
    if shell is None:
        return False
    reader = subprocess.Popen([shell, "-readonly", str(source), ".recover"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        loaded = subprocess.run([shell, str(scratch)], stdin=reader.stdout,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=RECOVER_TIMEOUT_SECS, check=False)
    except subprocess.TimeoutExpired:
        reader.kill()
        return False
    finally:
        if reader.stdout is not None:
            reader.stdout.close()
        try:
            reader.wait(RECOVER_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
    tighten(scratch, PRIVATE_FILE_MODE)
    return reader.returncode == 0 and loaded.returncode == 0


def _copy(source: sqlite3.Connection, fresh: sqlite3.Connection,
          tables: tuple[str, ...] = _TABLES) -> int:
    """Every readable row of ``tables`` that both have, by their shared columns; how many
    were added."""
    with contextlib.suppress(sqlite3.Error):  # a page count past the end of a cut file
        source.execute("PRAGMA writable_schema = ON")  # lets it be read (nothing is written)
    before = fresh.total_changes
    for table in tables:
        wanted = set(_columns(fresh, table))
        cols = [c for c in _columns(source, table) if c in wanted]
        if not cols:
            continue
        insert = (f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}) "
                  f"VALUES ({', '.join('?' * len(cols))})")
        for row in _scan(source, table, cols):
            with contextlib.suppress(sqlite3.Error):  # its session lost, a value refused
                fresh.execute(insert, row)
    return fresh.total_changes - before


def _settle(fresh: sqlite3.Connection) -> tuple[int, int]:
    """No claims, counters and byte totals from the kept history; (sessions, items)."""
    fresh.execute(_RELEASE_CLAIMS)
    fresh.execute(_COUNTERS)
    fresh.execute("DELETE FROM owner_usage")
    for stmt in _V7_FENCE_AND_BYTES[-2:]:  # stored bytes per session, then per owner
        fresh.execute(stmt)
    sessions = int(fresh.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])
    items = int(fresh.execute("SELECT COUNT(*) FROM history").fetchone()[0])
    return sessions, items


def salvage_into(db_path: Path, fresh_path: Path) -> tuple[str, int, int]:
    """Copy what can be read of ``db_path`` into the fresh store at ``fresh_path`` (of the
    current schema, in ``db_path``'s dir); (method, sessions, history items)."""
    scratch = fresh_path.with_name(fresh_path.name + ".recovered")
    methods: list[str] = []
    fresh = sqlite3.connect(fresh_path, isolation_level=None)
    try:
        fresh.execute("PRAGMA foreign_keys = ON")
        fresh.execute("BEGIN IMMEDIATE")
        try:
            with contextlib.suppress(sqlite3.Error), read_only(db_path) as source:
                if _copy(source, fresh):
                    methods.append("row by row")
            # What the shell's page walk finds besides (rows without a key: not twice).
            if _recover_with_shell(db_path, scratch):
                with contextlib.suppress(sqlite3.Error), read_only(scratch) as source:
                    if _copy(source, fresh, _TABLES[:-1]):
                        methods.append("sqlite3 .recover")
            counts = _settle(fresh)
            fresh.execute("COMMIT")
        except BaseException:
            fresh.execute("ROLLBACK")
            raise
        fresh.execute("PRAGMA journal_mode = DELETE")  # one file to rename into place
    finally:
        fresh.close()
        for leftover in (scratch, *(scratch.with_name(scratch.name + s)
                                    for s in SQLITE_SIDE_FILES)):
            leftover.unlink(missing_ok=True)
    return " and ".join(methods) or "nothing readable", *counts


def aside_name(db_path: Path, now: float | None = None) -> Path:
    """``<name>.damaged-<UTC timestamp>`` beside ``db_path``, not taken yet."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    candidate = db_path.with_name(f"{db_path.name}.damaged-{stamp}")
    n = 1
    while any(candidate.with_name(candidate.name + s).exists() for s in ("", *SQLITE_SIDE_FILES)):
        n += 1
        candidate = db_path.with_name(f"{db_path.name}.damaged-{stamp}-{n}")
    return candidate


def move_aside(db_path: Path, aside: Path) -> None:
    """Rename the store and its side files to ``aside`` (side files keep their suffix),
    owner-only."""
    for suffix in ("", *SQLITE_SIDE_FILES):
        src = db_path.with_name(db_path.name + suffix)
        if _own_regular(src, required=False):
            dst = aside.with_name(aside.name + suffix)
            os.rename(src, dst)
            tighten(dst, PRIVATE_FILE_MODE)


def _remove(path: Path) -> None:
    for suffix in ("", *SQLITE_SIDE_FILES):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


async def repair_store(db_path: Path, data_dir: Path, now_ms: int) -> Repaired:
    """Repair the damaged store at ``db_path`` as the module doc says; RepairRefused
    (nothing touched) when it must not or need not be."""
    await asyncio.to_thread(check_repairable, db_path, data_dir)
    fresh_path = db_path.with_name(f".{db_path.name}.repair-{os.getpid()}")
    await asyncio.to_thread(_remove, fresh_path)
    try:
        await asyncio.to_thread(private_file, fresh_path, sqlite=True)
        db = await connect(str(fresh_path))
        try:
            await migrate(db, now_ms)
        finally:
            await db.close()
        method, sessions, items = await asyncio.to_thread(salvage_into, db_path, fresh_path)
        aside = await asyncio.to_thread(aside_name, db_path)
        await asyncio.to_thread(move_aside, db_path, aside)
        await asyncio.to_thread(os.rename, fresh_path, db_path)
    finally:
        await asyncio.to_thread(_remove, fresh_path)
    return Repaired(str(aside), method, sessions, items)
