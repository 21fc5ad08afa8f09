"""A real MCP server written with the official SDK, for the agent's MCP tests.

``python mcp_server.py [--transport stdio|http|sse] [--mode normal|fail-start|hang-start]``

- stdio: speaks MCP on stdin/stdout;
- http / sse: binds 127.0.0.1 on a port the OS picks and prints ``PORT <n>``
  on stdout once it listens (streamable HTTP at ``/mcp``, SSE at ``/sse``);
- ``fail-start`` exits with code 7 before the handshake; ``hang-start`` never answers.

Tools (``echo`` and ``whoami`` are marked read-only, the others are not):
``echo``, ``whoami`` (cwd, pid, pgid, an env variable), ``blob_resource``,
``image``, ``big_blob`` (over the 10 MiB limit), ``fail`` (an ``isError``
result), ``crash`` (exits the process mid-call), ``slow``, ``spawn_child``
(starts a grandchild that ignores SIGTERM; its pid goes to the given file),
``shout_stderr``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    ToolAnnotations,
)

READ_ONLY = ToolAnnotations(read_only_hint=True)
PDF_BYTES = b"%PDF-1.4 test report\n"
PNG_BYTES = b"\x89PNG\r\n\x1a\n-test-image-"

server = MCPServer("testsrv")


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return f"echo: {text}"


@server.tool(annotations=READ_ONLY)
def whoami(variable: str = "MCP_TEST_VAR") -> str:
    """Where and how this server runs."""
    return json.dumps({"cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgid(0),
                       "value": os.environ.get(variable), "variable": variable,
                       "has_secret": "ACPGATE_TEST_API_KEY" in os.environ})


@server.tool()
def blob_resource() -> CallToolResult:
    """A PDF as an embedded blob resource, with a line of text."""
    blob = BlobResourceContents(uri="file:///reports/Q3.pdf", mime_type="application/pdf",
                                blob=base64.b64encode(PDF_BYTES).decode())
    return CallToolResult(content=[TextContent(text="here is the report"),
                                   EmbeddedResource(resource=blob)])


@server.tool()
def image() -> CallToolResult:
    """A PNG image."""
    return CallToolResult(content=[ImageContent(data=base64.b64encode(PNG_BYTES).decode(),
                                                mime_type="image/png")])


@server.tool()
def big_blob() -> CallToolResult:
    """A blob one byte over the 10 MiB limit."""
    data = base64.b64encode(b"\0" * (10 * 1024 * 1024 + 1)).decode()
    blob = BlobResourceContents(uri="file:///huge.bin", mime_type="application/octet-stream",
                                blob=data)
    return CallToolResult(content=[EmbeddedResource(resource=blob)])


@server.tool()
def fail() -> CallToolResult:
    """A tool-level error (isError)."""
    return CallToolResult(content=[TextContent(text="the widget is jammed")], is_error=True)


@server.tool()
def crash() -> str:
    """Exit the whole server in the middle of the call."""
    print("about to crash on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after ``seconds``."""
    await anyio.sleep(seconds)
    return "finally"


@server.tool()
def spawn_child(pidfile: str) -> str:
    """Start a grandchild that ignores SIGTERM; write {server, child} pids to ``pidfile``."""
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(pidfile + ".tmp", "w") as fh:
        json.dump({"server": os.getpid(), "child": child.pid}, fh)
    os.replace(pidfile + ".tmp", pidfile)
    return f"child {child.pid}"


@server.tool()
def shout_stderr(text: str) -> str:
    """Write ``text`` to stderr (never stdout)."""
    print(f"STDERR-MARK {text}", file=sys.stderr, flush=True)
    return "written"


def _serve_http(transport: str) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = server.sse_app() if transport == "sse" else server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    uv.run(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio", choices=["stdio", "http", "sse"])
    parser.add_argument("--mode", default="normal", choices=["normal", "fail-start", "hang-start"])
    args = parser.parse_args()
    if args.mode == "fail-start":
        print("refusing to start (fail-start)", file=sys.stderr, flush=True)
        sys.exit(7)
    if args.mode == "hang-start":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while True:
            time.sleep(60)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        _serve_http(args.transport)


if __name__ == "__main__":
    main()
