"""The install's log file, shared by every acpgate process and rotated by size.

``acpgate serve``'s three children, each ``acpgate acp`` an editor started and a
standalone service may all append to one ``[logging] file`` at once, so the
rotation of Python's ``RotatingFileHandler`` (each process renames by its own
count of bytes, then keeps writing into the file another one renamed) does not
fit. Here every write takes an exclusive ``flock`` on ``<file>.lock``, looks at
the file *by its path*: when another process rotated it meanwhile, this one
reopens the new file first; when the line would take it past ``max_bytes``, it
rotates (``file.log`` → ``file.log.1`` → … → ``file.log.<keep>``, the oldest
dropped) and reopens. Lines from several processes never interleave inside a
line (each is one ``write`` of an ``O_APPEND`` descriptor).

Blocking: this handler runs on the logging writer thread
(:mod:`services.common.log_output`), never on an event loop. Files are the
owner's alone (``0600`` in a ``0700`` dir): a log names sessions and paths.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from services.common.private_files import PRIVATE_FILE_MODE, private_dir, tighten

__all__ = ["SharedRotatingFile", "rotated_paths"]

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW


def rotated_paths(path: Path, keep: int) -> list[Path]:
    """``path`` and its rotated files, newest first: ``path``, ``path.1`` … ``path.<keep>``."""
    return [path, *(path.with_name(f"{path.name}.{n}") for n in range(1, keep + 1))]


class SharedRotatingFile(logging.Handler):
    """Appends formatted records to ``path`` under a lock every process of the install
    shares, rotating at ``max_bytes`` and keeping ``keep`` rotated files."""

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        super().__init__()
        self.path = path
        self.max_bytes = max(1024, max_bytes)
        self.keep = max(0, keep)
        private_dir(path.parent)
        self._lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                                | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
        tighten(Path(f"{path}.lock"), PRIVATE_FILE_MODE)
        self._fd = -1
        self._inode: tuple[int, int] | None = None
        self._open()

    def _open(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.path, _OPEN_FLAGS, PRIVATE_FILE_MODE)
        tighten(self.path, PRIVATE_FILE_MODE)  # one an older version or a umask left open
        st = os.fstat(self._fd)
        self._inode = (st.st_dev, st.st_ino)

    def _rotate(self) -> None:
        """Shift ``file.log.N`` up by one (the oldest goes) and start an empty file."""
        paths = rotated_paths(self.path, self.keep)
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            paths[-1].unlink(missing_ok=True)
            for older, newer in zip(reversed(paths[1:]), reversed(paths[:-1]), strict=True):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(newer, older)
        self._open()

    def emit(self, record: logging.LogRecord) -> None:
        """Append one formatted record (a failure goes to :meth:`handleError`, as logging's
        own handlers do: a full disk never stops acpgate)."""
        try:
            data = (self.format(record) + "\n").encode("utf-8", "replace")
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                try:
                    st = os.stat(self.path)
                    if (st.st_dev, st.st_ino) != self._inode:
                        self._open()  # another process rotated it
                        st = os.fstat(self._fd)
                except FileNotFoundError:
                    self._open()
                    st = os.fstat(self._fd)
                if st.st_size > 0 and st.st_size + len(data) > self.max_bytes:
                    self._rotate()
                os.write(self._fd, data)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        """Close the file and the lock."""
        for fd in (self._fd, self._lock_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._lock_fd = -1
        super().close()
