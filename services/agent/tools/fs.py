"""Policy-checked file-system helpers shared by the file tools (run off the event loop)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from services.agent.tools.base import ToolError
from services.session.policy import SecurityPolicy, check_read, check_write

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


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temp file + rename so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.acpgate-tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)
