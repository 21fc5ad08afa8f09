"""Adapter logs found by session id: ``<state dir>/logs/sessions/<session id>.log``.

The wrapper writes each lease's adapter stderr to ``<state dir>/logs/<lease
id>.log`` (bounded, rotated once to ``.log.1``): a lease knows its file, but an
operator knows a session. So when a lease starts to serve a session — spawned
for it, or a warm adapter taken by it — the lifecycle service

- appends a line to the lease's log saying so (``[acpgate] lease <id> serves
  session <id> (agent <alias>)``): a log read on its own says whose it is;
- points ``logs/sessions/<session id>.log`` at the lease's log (a relative
  symlink, replaced atomically): the session's newest adapter log, by name.

A warm adapter given back untouched drops the link it got; leases past
retention take theirs with their logs. Blocking: run off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Collection
from pathlib import Path

from services.common.private_files import PRIVATE_FILE_MODE, private_dir

__all__ = ["SESSIONS_DIR_NAME", "forget_session_log", "link_session_log",
           "remove_session_links", "session_log_path", "session_of_key"]

SESSIONS_DIR_NAME = "sessions"
LOG_DIR_NAME = "logs"
#: ``agent:<alias>:acp:<session id>`` (SPEC §13); ids that are safe as a file name.
_SESSION_KEY = re.compile(r"agent:(?P<alias>[^:]*):acp:(?P<sid>[A-Za-z0-9][A-Za-z0-9._-]{0,127})")


def session_of_key(session_key: str) -> tuple[str, str] | None:
    """``(alias, session id)`` of a session key; None for a pool's key or anything else."""
    match = _SESSION_KEY.fullmatch(session_key)
    return (match["alias"], match["sid"]) if match else None


def session_log_path(state_dir: Path, session_id: str) -> Path:
    """Where the link to a session's newest adapter log lies."""
    return state_dir / LOG_DIR_NAME / SESSIONS_DIR_NAME / f"{session_id}.log"


def link_session_log(state_dir: Path, lease_id: str, session_key: str) -> Path | None:
    """Note in the lease's log which session it serves and link the session's name to it;
    the link, or None for a key that names no session."""
    found = session_of_key(session_key)
    if found is None:
        return None
    alias, session_id = found
    logs = state_dir / LOG_DIR_NAME
    note = (f"[acpgate] {time.strftime('%Y-%m-%dT%H:%M:%S%z')} lease {lease_id} serves "
            f"session {session_id} (agent {alias})\n")
    fd = os.open(logs / f"{lease_id}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
                 | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        os.write(fd, note.encode())
    finally:
        os.close(fd)
    link = session_log_path(state_dir, session_id)
    private_dir(link.parent)
    temp = link.with_name(f".{uuid.uuid4().hex}.link")
    os.symlink(f"../{lease_id}.log", temp)
    os.replace(temp, link)
    return link


def _points_at(link: Path, lease_ids: Collection[str]) -> bool:
    with contextlib.suppress(OSError):
        return Path(os.readlink(link)).name.removesuffix(".log") in lease_ids
    return False


def forget_session_log(state_dir: Path, lease_id: str, session_key: str) -> None:
    """Drop the session's link while it still points at ``lease_id`` (a warm adapter given
    back to its pool unused was never that session's)."""
    found = session_of_key(session_key)
    if found is None:
        return
    link = session_log_path(state_dir, found[1])
    if _points_at(link, {lease_id}):
        link.unlink(missing_ok=True)


def remove_session_links(state_dir: Path, lease_ids: Collection[str]) -> None:
    """Drop every session link that points at one of ``lease_ids`` (their logs are going)."""
    wanted = set(lease_ids)
    folder = state_dir / LOG_DIR_NAME / SESSIONS_DIR_NAME
    try:
        links = list(folder.iterdir())
    except OSError:
        return
    for link in links:
        if link.is_symlink() and _points_at(link, wanted):
            link.unlink(missing_ok=True)
