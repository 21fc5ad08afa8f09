"""What state the SQLite store file is in, seen without changing it (``acpgate store
check``, ``acpgate doctor``, and ``acpgate store repair`` before it acts).

The file is looked at as it is: a symbolic link or anything but a regular file is
reported, never followed or opened (a FIFO would block the reader); a regular file
is opened read-only, through SQLite's ``mode=ro``, and checked with
``integrity_check`` (or the cheaper ``quick_check``), then its schema version and
its rows are counted. Blocking: run it off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services.session.store.records import LATEST_SCHEMA_VERSION
from services.session.store.sqlite.db import BUSY_TIMEOUT_MS, SQLITE_HEADER

__all__ = ["DAMAGED", "MISSING", "NEWER", "NOT_A_FILE", "OK", "Diagnosis", "diagnose",
           "read_only"]

#: No file (or an empty one): the first start creates the store.
MISSING: Final = "missing"
#: The file is intact and of a schema this acpgate uses.
OK: Final = "ok"
#: The file cannot be read as a store: damaged, not a database, not readable.
DAMAGED: Final = "damaged"
#: An intact database written by a newer acpgate.
NEWER: Final = "newer"
#: A symbolic link or something other than a regular file stands where the store should.
NOT_A_FILE: Final = "not-a-file"

#: How many of integrity_check's messages a diagnosis keeps.
_MESSAGES_KEPT: Final = 3


@dataclass(frozen=True)
class Diagnosis:
    """The store file's state, and what was counted in it when it could be read."""

    path: str
    state: str
    #: Why it is not usable ("" when it is).
    problem: str = ""
    schema_version: int = 0
    sessions: int = 0
    history_items: int = 0

    @property
    def usable(self) -> bool:
        """Whether acpgate starts on it (missing: it creates it)."""
        return self.state in (MISSING, OK)


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``path`` (nothing written into the database)."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
    con = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        yield con
    finally:
        con.close()


def _file_problem(path: Path) -> tuple[str, str] | None:
    """(state, problem) when ``path`` cannot even be opened as a database file."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return MISSING, ""
    except OSError as exc:
        return DAMAGED, f"cannot look at it: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return NOT_A_FILE, "it is a symbolic link (not followed)"
    if not stat.S_ISREG(st.st_mode):
        return NOT_A_FILE, "it is not a regular file"
    if st.st_size == 0:
        return MISSING, ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return DAMAGED, f"cannot read it: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as fh:
        header = fh.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        return DAMAGED, "it is not a SQLite database"
    return None


def _version(con: sqlite3.Connection) -> int:
    """The stored schema version (1: the zeroclaw layout, which has no version table)."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" in tables:
        row = con.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0
    return 1 if "sessions" in tables else 0


def _count(con: sqlite3.Connection, table: str) -> int:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if table not in tables:
        return 0
    return int(con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def diagnose(path: Path, *, thorough: bool = True) -> Diagnosis:
    """The state of the store file at ``path`` (``thorough``: ``integrity_check``, which
    reads every page and index; else ``quick_check``)."""
    found = _file_problem(path)
    if found is not None:
        return Diagnosis(str(path), *found)
    pragma = "integrity_check" if thorough else "quick_check"
    try:
        with read_only(path) as con:
            messages = [str(r[0]) for r in con.execute(f"PRAGMA {pragma}")]
            if messages != ["ok"]:
                shown = "; ".join(messages[:_MESSAGES_KEPT])
                more = len(messages) - _MESSAGES_KEPT
                return Diagnosis(str(path), DAMAGED, f"its {pragma} failed: {shown}"
                                 + (f" (and {more} more)" if more > 0 else ""))
            version = _version(con)
            if version > LATEST_SCHEMA_VERSION:
                return Diagnosis(str(path), NEWER, f"its schema version {version} is newer "
                                 f"than this acpgate reads ({LATEST_SCHEMA_VERSION})", version)
            history = "history" if version >= 2 else "messages"
            return Diagnosis(str(path), OK, "", version, _count(con, "sessions"),
                             _count(con, history))
    except sqlite3.Error as exc:
        return Diagnosis(str(path), DAMAGED, str(exc) or type(exc).__name__)
