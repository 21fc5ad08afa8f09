"""Owner-only lock files held with an exclusive ``flock``: one process at a time owns what
the file stands for (a serve's data dir, a lifecycle slot).

The lock belongs to the open file, so it lasts while any process holding a duplicate of
the descriptor runs (children a serve hands it to), and goes when the last one closes.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import IO

from services.common.private_files import PRIVATE_FILE_MODE, tighten

__all__ = ["open_lock_file", "try_lock"]


def open_lock_file(path: Path) -> IO[bytes]:
    """The lock file at ``path``, opened read-write and unbuffered, created owner-only,
    never followed through a link; one an earlier run or a umask left readable is
    tightened. The caller closes it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    tighten(path, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "r+b", buffering=0)


def try_lock(file: IO[bytes]) -> bool:
    """Take the exclusive lock without waiting; False when another open file holds it
    (any other error is raised)."""
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True
