"""The edge's memory with clients that stop reading while their sessions stream.

Twenty WebSocket clients (four in ``--quick``; small socket buffers, a one-frame client queue: the
kernel and the client library hold little) each open a session of the firehose
agent, prompt it to stream ``pace N 2`` (~500 updates/s, every update ~250
bytes on the wire) and never read again. The edge closes each client once its
outgoing queue stays full (1008), the session detaches and the agent streams on
into the session's replay ring, which the edge-wide replay budget bounds
(``[gateway] replay_budget_chars``). The edge's RSS is sampled every second for
the duration; the row reports start, peak and end, target flat and ≤ 150 MB.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from contextlib import AsyncExitStack

import psutil
from websockets.asyncio.client import ClientConnection

from bench.flood import MB, non_reading_client
from bench.stage import Serve, Stage
from bench.stats import Dist, Row

#: Each session's update spacing (the firehose's ``pace N MS``: ~500 updates/s).
PACE_MS = 2.0
SAMPLE_SECS = 1.0
#: The RSS target of the row.
TARGET_MB = 150.0


async def _call(ws: ClientConnection, request_id: int, method: str,
                params: dict[str, object]) -> dict[str, object]:
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                              "params": params}))
    while True:
        msg = json.loads(await ws.recv())
        if msg.get("id") == request_id:
            if "error" in msg:
                raise RuntimeError(f"{method}: {msg['error']}")
            return dict(msg["result"])


async def _stall(ws: ClientConnection, st: Stage, updates: int) -> None:
    """Open a session, start its stream, and read nothing more."""
    await _call(ws, 1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    new = await _call(ws, 2, "session/new", {"cwd": str(st.workspace), "mcpServers": []})
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {
        "sessionId": new["sessionId"],
        "prompt": [{"type": "text", "text": f"pace {updates} {PACE_MS}"}]}}))


async def run_stalled(st: Stage, serve: Serve, token: str, clients: int,
                      seconds: float) -> list[Row]:
    """The row: the edge's RSS over ``seconds`` with ``clients`` stalled clients."""
    edge = serve.children()["edge"]
    idle = edge.memory_info().rss / MB
    samples: list[float] = []
    updates = int(seconds * 1000 / PACE_MS) + 1000  # streams outlast the measurement
    async with AsyncExitStack() as stack:
        conns = [await stack.enter_async_context(non_reading_client(st.ws_url, token))
                 for _ in range(clients)]
        await asyncio.gather(*(_stall(ws, st, updates) for ws in conns))
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            with contextlib.suppress(psutil.Error):
                samples.append(await asyncio.to_thread(lambda: edge.memory_info().rss / MB))
            await asyncio.sleep(SAMPLE_SECS)
        relayed = await _relayed(st)
    first, peak, last = samples[0], max(samples), samples[-1]
    return [Row("36", f"edge RSS, {clients} clients that stopped reading on sessions streaming "
                f"{1000 / PACE_MS:.0f} updates/s, {seconds:.0f} s", "MB",
                Dist.of(samples), "edge RSS of the fresh gateway", Dist(idle, idle, 1),
                f"flat, ≤ {TARGET_MB:.0f} MB", peak <= TARGET_MB,
                f"start {first:.1f} / peak {peak:.1f} / end {last:.1f} MB "
                f"({len(samples)} samples); {relayed}")]


async def _relayed(st: Stage) -> str:
    """What the edge relayed and its rings hold (its ``/metrics``), for the note."""
    reader, writer = await asyncio.open_connection("127.0.0.1", st.port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        text = (await asyncio.wait_for(reader.read(), 10)).decode(errors="replace")
    except (OSError, TimeoutError):
        return "no /metrics"
    finally:
        writer.close()
    figures = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(("acpgate_relayed_updates_total", "acpgate_replay_")):
            figures[name] = value
    updates = figures.get("acpgate_relayed_updates_total", "?")
    held = figures.get('acpgate_replay_ring_chars{of="held"}', "?")
    return f"{updates} updates relayed; rings hold {held} (budget-counted chars) at the end"
