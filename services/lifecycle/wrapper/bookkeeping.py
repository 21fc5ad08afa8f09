"""The wrapper's bookkeeping: the adapter's stderr log (bounded, rotated once) and its
scan of ``/proc`` for what is left of the adapter's tree.

Standard library only: installed beside the wrapper (as ``wrapper_log.py``) and loaded by it
from there.
"""

from __future__ import annotations

import os


class BoundedLog:
    """An append-only log that never exceeds ``2 * max_bytes`` (current + ``.1``)."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max(1024, max_bytes)
        self._fd = -1
        self._size = 0
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        """Append ``data``, rotating first when the file would grow past the bound."""
        if self._fd < 0 or not data:
            return
        if len(data) > self.max_bytes:
            data = data[-self.max_bytes :]
        if self._size + len(data) > self.max_bytes:
            os.close(self._fd)
            os.replace(self.path, self.path + ".1")
            self._fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600
            )
            self._size = 0
        os.write(self._fd, data)
        self._size += len(data)

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def proc_scan(me: int, pgid: int) -> list[int]:
    """Live (non-zombie) members of ``pgid`` and live direct children of ``me``."""
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2 :].split()
        if len(rest) < 3 or rest[0] in (b"Z", b"X"):
            continue
        pid = int(name)
        if pid != me and (int(rest[2]) == pgid or int(rest[1]) == me):
            found.append(pid)
    return found
