"""The private temp dirs that hold embedded mode's unix sockets, and their cleanup.

``acpgate acp`` serves its own session and lifecycle services on unix sockets
in a fresh ``/tmp/acpg-*`` dir (unix socket paths are limited to ~100 bytes,
so not under the data dir). A clean stop removes the dir; a SIGKILL or a
crash cannot, so every start first sweeps the dirs of this user that no live
process serves any more.

A dir is stale only when all of this holds, so a live or starting acpgate
never loses its sockets: it belongs to this uid and is a real dir (not a
link), it is older than ``min_age_secs`` (a starting process creates the dir
before it binds), it holds nothing but ``*.sock`` sockets, and none of them
accepts a connection (a dead listener's socket file refuses with
ECONNREFUSED; any other outcome counts as alive).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.common.in_use import socket_is_served
from services.common.logs import get_logger

SOCKET_DIR_PREFIX = "acpg-"
#: Exactly what :func:`tempfile.mkdtemp` makes of the prefix (not the tests' ``acpg-gw-…``).
_SOCKET_DIR_NAME = re.compile(re.escape(SOCKET_DIR_PREFIX) + "[a-z0-9_]{8}")
#: A dir younger than this may belong to a process that has not bound its sockets yet.
MIN_AGE_SECS = 60.0

log = get_logger("socket_dirs")


def make_socket_dir(root: str = "/tmp") -> str:
    """A new private (0700) dir for this process's sockets."""
    return tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX, dir=root)


def _refuses(sock_path: Path) -> bool:
    """True when nothing listens on the unix socket ``sock_path`` any more."""
    return not socket_is_served(str(sock_path))


def is_stale(path: Path, min_age_secs: float = MIN_AGE_SECS,
             now: Callable[[], float] = time.time) -> bool:
    """Whether ``path`` is a socket dir of this user that no live process serves."""
    try:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False
        if now() - st.st_mtime < min_age_secs:
            return False
        entries = list(path.iterdir())
        for entry in entries:
            if not entry.name.endswith(".sock") or not stat.S_ISSOCK(entry.lstat().st_mode):
                return False  # not ours to judge: leave it
        return all(_refuses(entry) for entry in entries)
    except OSError:
        return False


def sweep_stale(root: str = "/tmp", min_age_secs: float = MIN_AGE_SECS,
                now: Callable[[], float] = time.time) -> list[str]:
    """Remove the stale socket dirs under ``root``; returns the removed paths."""
    removed: list[str] = []
    try:
        candidates = [p for p in Path(root).iterdir() if _SOCKET_DIR_NAME.fullmatch(p.name)]
    except OSError:
        return removed
    for path in candidates:
        if is_stale(path, min_age_secs, now):
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(str(path))
    return removed


async def sweep_stale_async(root: str = "/tmp", min_age_secs: float = MIN_AGE_SECS) -> None:
    """:func:`sweep_stale` off the event loop (it connects to sockets), logging what went."""
    removed = await asyncio.to_thread(sweep_stale, root, min_age_secs)
    if removed:
        log.info("stale_socket_dirs_removed", count=len(removed))
