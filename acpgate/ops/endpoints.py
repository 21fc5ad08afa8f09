"""Which acpgate processes serve this data dir now, and where: ``<data dir>/run/endpoints/``.

``acpgate serve`` listens on fixed sockets, but each ``acpgate acp`` an editor
starts serves its own session and lifecycle services on private sockets in a
fresh ``/tmp/acpg-*`` dir. So that operators' commands (``acpgate ps``,
``doctor``) can reach every one of them, each such process writes
``<pid>.json`` here when it serves — its process kind, PID and start time, both
service addresses, its gateway URL, acpgate's version — and removes it when it
stops. A file whose process is gone (a SIGKILL) is skipped by readers and
removed by the next writer. The addresses are no secret (the credential every
call needs is), but the files are the owner's alone like all of the data dir.

Blocking (files, the process table): run off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from acpgate import __version__
from services.common.logs import get_logger
from services.common.private_files import PRIVATE_FILE_MODE, private_dir

__all__ = ["ENDPOINTS_DIR", "Endpoint", "announce", "live_endpoints", "register", "unregister"]

log = get_logger("endpoints")

ENDPOINTS_DIR = "endpoints"


@dataclass(frozen=True)
class Endpoint:
    """One running process's services."""

    process: str
    pid: int
    #: The process's start time (psutil ``create_time``): a reused PID is another process.
    created: float
    session_addr: str
    lifecycle_addr: str
    gateway: str = ""
    version: str = ""
    started_at: float = 0.0

    @property
    def name(self) -> str:
        """``acp[4242]``: how operators' commands name it."""
        return f"{self.process}[{self.pid}]"


def _dir(data_dir: Path) -> Path:
    return data_dir / "run" / ENDPOINTS_DIR


def _alive(endpoint: Endpoint) -> bool:
    try:
        proc = psutil.Process(endpoint.pid)
        return proc.status() != psutil.STATUS_ZOMBIE and \
            abs(proc.create_time() - endpoint.created) < 1.0
    except psutil.Error:
        return False


def _read(path: Path) -> Endpoint | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Endpoint(**raw)
    except (OSError, ValueError, TypeError):
        return None


def live_endpoints(data_dir: Path) -> list[Endpoint]:
    """Every endpoint of ``data_dir`` whose process still runs, oldest first."""
    try:
        paths = sorted(_dir(data_dir).glob("*.json"))
    except OSError:
        return []
    found = [e for e in map(_read, paths) if e is not None and _alive(e)]
    return sorted(found, key=lambda e: e.started_at)


def register(data_dir: Path, process: str, session_addr: str, lifecycle_addr: str, *,
             gateway: str = "", version: str = "") -> Path:
    """Write this process's endpoint (and drop those of processes that are gone)."""
    folder = private_dir(_dir(data_dir))
    for stale in folder.glob("*.json"):
        endpoint = _read(stale)
        if endpoint is None or not _alive(endpoint):
            stale.unlink(missing_ok=True)
    me = Endpoint(process=process, pid=os.getpid(),
                  created=psutil.Process().create_time(), session_addr=session_addr,
                  lifecycle_addr=lifecycle_addr, gateway=gateway, version=version,
                  started_at=time.time())
    path = folder / f"{me.pid}.json"
    temp = folder / f".{me.pid}.json.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW,
                 PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(asdict(me), fh)
    os.replace(temp, path)
    return path


def unregister(path: Path) -> None:
    """Remove an endpoint this process wrote (it stops serving)."""
    with contextlib.suppress(OSError):
        path.unlink()


async def announce(data_dir: Path, process: str, session_addr: str, lifecycle_addr: str,
                   gateway: str = "") -> Path | None:
    """:func:`register` off the event loop, with acpgate's version; None (logged) when the
    data dir cannot take it (read-only): operators' commands will not see the process."""
    try:
        return await asyncio.to_thread(register, data_dir, process, session_addr,
                                       lifecycle_addr, gateway=gateway, version=__version__)
    except OSError as exc:
        log.warning("endpoint_not_registered", why=str(exc))
        return None
