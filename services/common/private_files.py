"""acpgate's own state on disk is private to the user it runs as.

Session stores, lease databases, tokens, the service key, instance ids and adapter
logs hold conversations, credentials and process identities: another user on the
host must not read them. Every such file is created ``0600`` and every directory
holding them ``0700``; a file or directory left broader by an earlier version (or
a umask) is tightened when acpgate opens it — only when it is ours (another
user's file is never chmod-ed; opening it fails on its own).

Blocking (file-system calls): run off the event loop at start-up.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from pathlib import Path

__all__ = ["PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "private_dir", "private_file", "tighten",
           "write_private_text"]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
#: Files SQLite keeps beside a database in WAL mode (created with the database's mode).
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def tighten(path: Path, mode: int) -> None:
    """Drop group and other permissions of ``path`` when it is ours and broader than
    ``mode`` (a missing path, or one we may not change, is left as it is)."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(st.st_mode) & mode)


def private_dir(path: Path) -> Path:
    """Create ``path`` and each of its missing parents ``0700`` (``mkdir -p`` would give
    the parents the umask's mode); tighten ``path`` when it existed."""
    missing: list[Path] = []
    for part in (path, *path.parents):
        if part.exists():
            break
        missing.append(part)
    for part in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            part.mkdir(mode=PRIVATE_DIR_MODE)
    if not path.is_dir():
        path.mkdir(mode=PRIVATE_DIR_MODE)  # raises the precise error (a file is in the way)
    tighten(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path, *, sqlite: bool = False) -> Path:
    """Make sure ``path`` exists as an owner-only file before anything writes into it;
    with ``sqlite``, also tighten the database's side files an earlier run left."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC,
                         PRIVATE_FILE_MODE))
    tighten(path, PRIVATE_FILE_MODE)
    if sqlite:
        for suffix in SQLITE_SIDE_FILES:
            tighten(path.with_name(path.name + suffix), PRIVATE_FILE_MODE)
    return path


def write_private_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, as an owner-only file (``config.toml``
    holds agents' ``env``, which may be API keys)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
