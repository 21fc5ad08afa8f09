"""Which sessions had a turn running when an edge stepped down for a hot restart.

The edge that steps down writes the ids of its sessions whose turn runs into
``<data dir>/run/edge-<hash of its claim name>.running.json`` (``0600``, in the private
``0700`` run dir, written beside and renamed into place), and its successor — the same
claim name — reads it at start and removes it, whatever it held. The store's turn marks
decide which turns the successor carries on (:mod:`services.edge.sessions.readopt`); the
note tells what the predecessor saw, for the logs.

A note is taken only when it cannot have been planted or left over: a regular file (a
symlink, a FIFO or a directory at its path is not followed), owned by this uid, not
readable or writable by anyone else, in a run dir that is this uid's and private, at
most :data:`MAX_NOTE_BYTES`, naming this edge's claim name (another install's or another
worker's note names another), and written at most :data:`MAX_NOTE_AGE_MS` ago (a note an
earlier start left is stale). Anything else says nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from services.common.private_files import PRIVATE_FILE_MODE, private_dir

__all__ = ["MAX_NOTE_AGE_MS", "MAX_NOTE_BYTES", "note_path", "take_note", "write_note"]

#: The most bytes a note may have (a session id per running turn).
MAX_NOTE_BYTES: Final = 4 * 1024 * 1024
#: The oldest note taken: a successor reads it within seconds of the step-down.
MAX_NOTE_AGE_MS: Final = 120_000
#: Group and other permission bits: a note or run dir with any of them is not private.
_NOT_PRIVATE: Final = 0o077


def note_path(data_dir: Path, claim_name: str) -> Path:
    """The note of the edge whose sessions are claimed as ``claim_name``."""
    digest = hashlib.sha256(claim_name.encode()).hexdigest()[:16]
    return data_dir / "run" / f"edge-{digest}.running.json"


def _now_ms() -> int:
    return int(time.time() * 1000)


def write_note(path: Path, claim_name: str, session_ids: Iterable[str]) -> None:
    """Write the note (atomically, owner-only, never through a link left at its temporary
    path). Blocking: a stepping-down edge only."""
    private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        json.dump({"claim": claim_name, "written_ms": _now_ms(),
                   "running": sorted(session_ids)}, out)
    os.replace(tmp, path)


def _private_dir(path: Path) -> bool:
    """Whether ``path`` is a directory of this uid that nobody else may enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & _NOT_PRIVATE)


def _read(path: Path) -> bytes | None:
    """The note's bytes when it is a private regular file of this uid (module doc)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # none, or a symlink (ELOOP)
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & _NOT_PRIVATE or st.st_size > MAX_NOTE_BYTES):
            return None
        with os.fdopen(os.dup(fd), "rb") as src:
            return src.read(MAX_NOTE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def take_note(path: Path, claim_name: str) -> frozenset[str]:
    """The session ids the note names for ``claim_name``, the note removed; empty when
    there is none or it is not to be taken (module doc). Blocking: start-up only."""
    try:
        raw = _read(path) if _private_dir(path.parent) else None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    if raw is None or len(raw) > MAX_NOTE_BYTES:
        return frozenset()
    try:
        note = json.loads(raw)
    except ValueError:
        return frozenset()
    if not isinstance(note, dict) or note.get("claim") != claim_name:
        return frozenset()
    written = note.get("written_ms")
    if not isinstance(written, int) or not 0 <= _now_ms() - written <= MAX_NOTE_AGE_MS:
        return frozenset()
    running = note.get("running")
    if isinstance(running, list):
        return frozenset(s for s in running if isinstance(s, str))
    return frozenset()
