"""Helpers for the MCP tests: ACP ``McpServer`` entries for the SDK test server, and HTTP runs.

The server is ``tests/agent/mcp_server.py``, a real MCP server written with the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil

from tests.agent.harness import Client, ScriptedProvider

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


async def new_session(c: Client, ws: Path, servers: list[dict[str, Any]]) -> str:
    """``session/new`` in ``ws`` with these ``mcpServers``; the session id."""
    result = await c.call("session/new", {"cwd": str(ws), "mcpServers": servers})
    return str(result["sessionId"])


def real(path: Path) -> Path:
    """The real path (the agent stores blobs under the real workspace)."""
    return path.resolve()


def uploaded(ws: Path, data: bytes, ext: str) -> Path:
    """Where SPEC §4 puts ``data``: ``<real ws>/uploads/<sha256>.<ext>``."""
    return real(ws) / "uploads" / f"{hashlib.sha256(data).hexdigest()}.{ext}"


def tool_message(provider: ScriptedProvider, call_no: int = 1) -> str:
    """The text of the last tool result the model saw in model call ``call_no``."""
    _, messages, _ = provider.calls[call_no]
    return next(m.text for m in reversed(messages) if m.role == "tool")
