"""One ``acpgate serve`` per data dir: ``<data dir>/run/serve.lock``.

``acpgate serve``'s services listen on fixed unix sockets under ``<data dir>/run``
(``services.common.addresses``), so a second ``serve`` on the same data dir could
only fight the first for them. It refuses instead, at once, naming the first:
``acpgate serve is already running on <data dir> (pid N, port P)``. (Any number of
``acpgate acp`` may run beside it: their services live on private sockets, and
each lifecycle service holds its own instance slot.) A second gateway on one
machine gets its own config dir, or its own ``[services]`` addresses and data dir.

The lock is an exclusive ``flock`` on the file, which holds the holder's PID and
port. serve hands the open file to each of its children: the lock stays held
until serve *and* every child are gone. So after a ``kill -9`` of serve, whose
children then stop on their own (parent-death signal), a new serve waits for
them — their sockets and leases — instead of failing on sockets still served.

A hot restart (``acpgate serve --replace``) does not wait: the serve it replaces hands
it the locked file itself (``SCM_RIGHTS``: the same open file, so the same lock, never
released in between), and :func:`adopt_serve_lock` writes the new PID in.

Blocking (file locks, a bounded wait): run off the event loop.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from services.common.in_use import AddressInUse
from services.common.lock_files import open_lock_file, try_lock
from services.common.logs import get_logger
from services.common.private_files import private_dir

__all__ = ["SERVE_LOCK_NAME", "ServeLock", "adopt_serve_lock", "take_serve_lock"]

SERVE_LOCK_NAME = "serve.lock"
#: How long a new serve waits for the children of a killed one to finish stopping
#: (their grace after SIGTERM is ``SupervisorOptions.stop_grace``, 20 s by default).
WAIT_FOR_PREVIOUS_SECS = 60.0
_POLL_SECS = 0.1

log = get_logger("serve")


@dataclass
class ServeLock:
    """The held serve lock (its open file; None once released)."""

    path: Path
    file: IO[bytes] | None = field(default=None, repr=False)

    def fileno(self) -> int:
        """The lock file's descriptor (handed to every child)."""
        if self.file is None:
            raise ValueError("the serve lock was released")
        return self.file.fileno()

    def release(self) -> None:
        """Close this process's descriptor (the lock goes once no child holds it)."""
        file, self.file = self.file, None
        if file is not None:
            file.close()


def _holder(file: IO[bytes], path: Path) -> tuple[int, str]:
    """(PID, port) written by the holder; PID 0 when unreadable or no longer running.

    A PID counts as the holder's only while a process that started before the file
    was written runs under it (a recycled PID belongs to a younger process)."""
    with contextlib.suppress(OSError, ValueError):
        file.seek(0)
        pid_text, _, port = file.read(64).decode().strip().partition(" ")
        pid = int(pid_text)
        written = path.stat().st_mtime
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= written + 1:
                return pid, port
        return 0, port
    return 0, ""


def take_serve_lock(data_dir: Path, port: int,
                    wait_secs: float = WAIT_FOR_PREVIOUS_SECS) -> ServeLock:
    """Hold ``<data_dir>/run/serve.lock`` for this serve, or raise AddressInUse naming
    the serve that runs there. A lock held with no serve running (its children still
    stopping) is waited for, at most ``wait_secs``."""
    path = private_dir(data_dir / "run") / SERVE_LOCK_NAME
    file = open_lock_file(path)
    try:
        deadline = time.monotonic() + wait_secs
        waiting = False
        while not try_lock(file):
            pid, held_port = _holder(file, path)
            if pid:
                raise AddressInUse(f"acpgate serve is already running on {data_dir} "
                                   f"(pid {pid}, port {held_port or '?'})")
            if time.monotonic() >= deadline:
                raise AddressInUse(f"the processes of an acpgate serve that is gone still hold "
                                   f"{path} after {wait_secs:.0f} s")
            if not waiting:
                log.warning("serve_waiting_for_previous", lock=str(path))
                waiting = True
            time.sleep(_POLL_SECS)
        _note_holder(file, port)
    except BaseException:
        file.close()
        raise
    return ServeLock(path, file)


def _note_holder(file: IO[bytes], port: int) -> None:
    """Write this serve's PID and port into the held lock file."""
    file.seek(0)
    file.truncate()
    file.write(f"{os.getpid()} {port}\n".encode())


def adopt_serve_lock(data_dir: Path, fd: int, port: int) -> ServeLock:
    """The serve lock handed over as ``fd`` by the serve this one replaces: it must be
    ``<data_dir>/run/serve.lock`` and locked (the open file the old serve locked), else
    AddressInUse says why. Writes this serve's PID and ``port`` in."""
    path = data_dir / "run" / SERVE_LOCK_NAME
    file = os.fdopen(fd, "r+b", buffering=0)
    try:
        st, on_disk = os.fstat(fd), path.stat()
        if (st.st_dev, st.st_ino) != (on_disk.st_dev, on_disk.st_ino) or not try_lock(file):
            raise AddressInUse(f"the serve lock handed over is not the held {path}")
        _note_holder(file, port)
    except OSError as exc:
        file.close()
        raise AddressInUse(f"the serve lock handed over is unusable: {exc}") from None
    except BaseException:
        file.close()
        raise
    return ServeLock(path, file)
