"""Policy-checked file-system helpers shared by the file tools (run off the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path

from services.agent.enforce import check_read, check_write
from services.agent.tools.base import ToolError
from services.common.policy import SecurityPolicy

#: Largest text file the read/edit tools load.
MAX_TEXT_BYTES = 2 * 1024 * 1024


async def resolve_read(policy: SecurityPolicy, path: str) -> Path:
    """``check_read`` off the loop (it touches the file system to resolve symlinks)."""
    return await asyncio.to_thread(check_read, policy, path)


async def resolve_write(policy: SecurityPolicy, path: str) -> Path:
    """``check_write`` off the loop."""
    return await asyncio.to_thread(check_write, policy, path)


def read_text(path: Path) -> str:
    """A UTF-8 text file's content; refuses directories, binary and oversized files."""
    if path.is_dir():
        raise ToolError(f"{path} is a directory")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ToolError(f"file not found: {path}") from None
    if size > MAX_TEXT_BYTES:
        raise ToolError(f"{path} is too large for a text tool ({size} bytes)")
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise ToolError(f"{path} looks like a binary file ({size} bytes)")
    return data.decode("utf-8", "replace")


def read_text_or_none(path: Path) -> str | None:
    """The file's text, or None if it does not exist (a new file)."""
    if not path.exists():
        return None
    return read_text(path)


def write_bytes_atomic(path: Path, data: bytes, *, keep_mode: bool = True) -> None:
    """Write via a fresh temp file + rename so a reader never sees half a file.

    The temp file is created with O_EXCL under a random name: a predictable
    name could be planted as a symlink (the shell can write in the workspace)
    and the write would follow it out of the roots; two writes at once would
    also collide on it.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".acpgate-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if keep_mode and path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (see :func:`write_bytes_atomic`), creating parent dirs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode("utf-8"))
