"""Raw reads of ``/proc/<pid>/`` files: environment keys, and whose a process is.

Only the lifecycle service's own user's processes are ever its to signal or to
take as evidence: a lease's wrapper and adapter run as that user, and a process
of another user — whatever its command line or environment says — never is
acpgate's. :func:`runs_as_service` decides that from the kernel's ``Uid:`` line
(real, effective, saved and filesystem uid), against this process's effective uid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import psutil

__all__ = ["environ_bytes", "pick_keys", "process_uids", "runs_as_service"]


def environ_bytes(pid: int) -> bytes | None:
    """The raw ``/proc/<pid>/environ`` (NUL-separated), None when unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def pick_keys(raw: bytes, keys: Sequence[str]) -> dict[str, str]:
    """The ``keys`` present in a NUL-separated environment block."""
    wanted = {k.encode() + b"=": k for k in keys}
    if not any(prefix in raw for prefix in wanted):
        return {}  # the common case: one substring search, no split
    out: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        for prefix, key in wanted.items():
            if entry.startswith(prefix):
                out[key] = entry[len(prefix) :].decode("utf-8", "surrogateescape")
    return out


def process_uids(pid: int) -> tuple[int, ...] | None:
    """``pid``'s real, effective, saved and filesystem uid (``/proc/<pid>/status``; where
    there is no ``/proc``, psutil's real, effective and saved); None when unreadable."""
    if not os.path.isdir("/proc/self"):
        try:
            return tuple(psutil.Process(pid).uids())
        except (psutil.Error, OSError):
            return None
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    uids = tuple(int(u) for u in line.split()[1:])
                    return uids if len(uids) == 4 else None
    except (OSError, ValueError):
        return None
    return None


def runs_as_service(pid: int) -> bool:
    """True when every uid of ``pid`` is this service's effective uid. False for another
    user's process, one that changed uid (a set-uid program: its uids differ), and one
    whose status cannot be read: none of those is acpgate's."""
    uids = process_uids(pid)
    me = os.geteuid()
    return uids is not None and all(uid == me for uid in uids)
