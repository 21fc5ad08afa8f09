"""Helpers for the MCP tests: ACP ``McpServer`` entries for the SDK test server, and HTTP runs.

The server is ``tests/agent/mcp_server.py``, a real MCP server written with the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil

SERVER = Path(__file__).resolve().parent / "mcp_server.py"


def stdio_entry(name: str = "docs", *, mode: str = "normal",
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """An ACP stdio ``McpServer`` that runs the test server."""
    return {"name": name, "command": sys.executable, "args": [str(SERVER), "--mode", mode],
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}


def http_entry(url: str, name: str = "web", transport: str = "http",
               headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An ACP http/sse ``McpServer``."""
    return {"type": transport, "name": name, "url": url,
            "headers": [{"name": k, "value": v} for k, v in (headers or {}).items()]}


@contextlib.asynccontextmanager
async def http_server(transport: str = "http") -> AsyncIterator[str]:
    """The test server over streamable HTTP (``/mcp``) or SSE (``/sse``) on an OS-chosen port."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), "--transport", transport,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("PORT "), line
        path = "/mcp" if transport == "http" else "/sse"
        yield f"http://127.0.0.1:{int(line.split()[1])}{path}"
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def server_processes() -> list[psutil.Process]:
    """Live test-server processes that are descendants of this test process."""
    out = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and str(SERVER) in " ".join(p.cmdline()):
                out.append(p)
    return out
