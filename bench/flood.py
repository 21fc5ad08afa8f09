"""The edge's memory under a request flood from a client that stopped reading.

One WebSocket client connects, stops reading (a small socket receive buffer
and a one-frame client queue, so the kernel and the client library hold
little) and sends ``initialize`` requests as fast as the edge takes them —
60,000 of them, each as big as an editor's (~500 bytes). A bounded edge
closes the client (1008) once its replies waiting to be written pass the
connection's bound, and stops reading from it; an unbounded one holds every
request and every answer. Measured: the edge's peak RSS (``VmHWM``) and its
RSS once the connection is gone, against the fresh gateway's.

:func:`non_reading_client`, :func:`send_flood` and :func:`drain` are also what
``tests/security/test_backpressure.py`` floods the gateway with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.sizes import Sizes
from bench.stage import Serve
from bench.stats import Dist, Row

MB = 1024 * 1024
#: The client's socket buffers: small, so that the kernel holds few of the edge's answers.
CLIENT_SOCKET_BUFFER = 16 * 1024


def initialize_frame(request_id: int, pad: int = 300) -> str:
    """An ``initialize`` request as an editor sends it, padded with ``_meta`` to ~500 bytes."""
    return json.dumps({
        "jsonrpc": "2.0", "id": request_id, "method": "initialize",
        "params": {"protocolVersion": 1,
                   "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                          "terminal": True},
                   "clientInfo": {"name": "flood", "title": "A client that stopped reading",
                                  "version": "1.0"},
                   "_meta": {"pad": "x" * pad}},
    })


@asynccontextmanager
async def non_reading_client(url: str, token: str) -> AsyncIterator[ClientConnection]:
    """A WebSocket client of ``url`` that reads only when told to (``recv``, :func:`drain`)."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_SOCKET_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SOCKET_BUFFER)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
    ws = await connect(url, sock=sock, additional_headers={"Authorization": f"Bearer {token}"},
                       max_queue=1, max_size=None, ping_interval=None, close_timeout=5)
    try:
        yield ws
    finally:
        with contextlib.suppress(Exception):
            await ws.close()


async def send_flood(ws: ClientConnection, n: int, first_id: int = 1) -> int:
    """Send ``n`` initialize requests without reading; how many went out before the edge hung up."""
    for i in range(n):
        try:
            await ws.send(initialize_frame(first_id + i))
        except ConnectionClosed:
            return i
    return n


@dataclass(frozen=True)
class Drained:
    """What a flooding client got once it read again."""

    messages: int
    #: The close code the client saw (1006 when the edge had to abort the TCP connection).
    close_code: int | None


async def drain(ws: ClientConnection, expect: int, wait: float = 120.0) -> Drained:
    """Read until the connection closes or ``expect`` messages came (at most ``wait`` s)."""
    count = 0

    async def read_all() -> None:
        nonlocal count
        with contextlib.suppress(ConnectionClosed):
            async for _ in ws:
                count += 1
                if count >= expect:
                    return

    await asyncio.wait_for(read_all(), wait)
    return Drained(count, ws.close_code)


def _rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS = VmHWM) of ``pid`` in MB."""
    proc = psutil.Process(pid)
    peak = float("nan")
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024 / MB
    return proc.memory_info().rss / MB, peak


async def run_flood(url: str, serve: Serve, token: str, sizes: Sizes) -> list[Row]:
    """Rows #7: the edge's peak and settled RSS under the flood."""
    edge = serve.children()["edge"]
    idle, _ = await asyncio.to_thread(_rss_mb, edge.pid)
    async with non_reading_client(url, token) as ws:
        sent = await send_flood(ws, sizes.flood_requests)
        drained = await drain(ws, expect=sent)
    await asyncio.sleep(1.0)  # the closed connection's tasks and sessions are released
    after, peak = await asyncio.to_thread(_rss_mb, edge.pid)
    n = sizes.flood_requests
    note = (f"{n:,} initialize requests of ~500 B; the edge took {sent:,} before it hung up; "
            f"the client read {drained.messages:,} answers, then close code {drained.close_code}")
    return [
        Row("7", f"edge peak RSS (VmHWM), {n:,} requests from a client that stopped reading",
            "MB", Dist(peak, peak, 1), "edge RSS of the fresh gateway", Dist(idle, idle, 1),
            "≤ 150 MB", peak <= 150.0, note),
        Row("7", "edge RSS after that client was closed", "MB", Dist(after, after, 1),
            "edge RSS of the fresh gateway", Dist(idle, idle, 1)),
    ]
