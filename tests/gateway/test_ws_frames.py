"""A run of queued messages leaves the gateway in one socket write, each still its own frame.

``services.edge.transport.ws_frames`` builds uncompressed text frames itself; they must be
byte for byte what websockets would send, and websockets' own parser must read
them back. An :class:`~services.edge.transport.outqueue.Outbox` over a real connection
writes what is queued when its pump wakes with one ``transport.write`` (bounded
by ``WRITE_RUN_CHARS``), and the client still receives one message per frame,
in order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.protocol import CLIENT, Protocol

from services.edge.transport.outqueue import WRITE_RUN_CHARS, Outbox
from services.edge.transport.ws_frames import text_frame

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_text_frame_is_what_websockets_sends_and_parses(size: int) -> None:
    payload = ("é" * size).encode()[:size]  # a multi-byte payload cut anywhere is still bytes
    assert text_frame(payload) == Frame(Opcode.TEXT, payload).serialize(mask=False)
    client = Protocol(CLIENT, max_size=None)
    client.receive_data(text_frame(b"x" * size) + text_frame(b"y"))
    frames = client.events_received()
    assert [(f.opcode, f.fin, bytes(f.data)) for f in frames] == [
        (Opcode.TEXT, True, b"x" * size), (Opcode.TEXT, True, b"y")]


class Writes:
    """Counts the socket writes of one server connection (its transport's ``write``)."""

    def __init__(self, ws: ServerConnection) -> None:
        self.sizes: list[int] = []
        transport = ws.transport
        real = transport.write

        def write(data: Any) -> None:
            self.sizes.append(len(data))
            real(data)

        transport.write = write  # type: ignore[method-assign]


@asynccontextmanager
async def outbox_server(messages: list[str]) -> AsyncIterator[tuple[str, list[Writes]]]:
    """A server that queues ``messages`` at once on each connection's Outbox, then waits."""
    seen: list[Writes] = []

    async def handle(ws: ServerConnection) -> None:
        seen.append(Writes(ws))
        outbox = Outbox(ws, conn_id=1)
        await outbox.send_many(messages)  # queued before the pump runs: one run
        await ws.wait_closed()
        await outbox.aclose()

    async with serve(handle, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/", seen


async def receive(url: str, count: int) -> list[Any]:
    async with connect(url, proxy=None, compression=None, max_size=None) as ws:
        return [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(count)]


async def test_queued_messages_go_out_in_one_write_one_frame_each() -> None:
    messages = [json.dumps({"jsonrpc": "2.0", "method": "tick", "params": {"i": i}})
                for i in range(500)]
    assert sum(map(len, messages)) < WRITE_RUN_CHARS
    async with outbox_server(messages) as (url, seen):
        got = await receive(url, len(messages))
    assert [m["params"]["i"] for m in got] == list(range(500))
    (writes,) = seen
    framed = sum(len(text_frame(m.encode())) for m in messages)
    assert writes.sizes[0] == framed  # 500 frames, one socket write (then the close frame)


async def test_a_long_burst_is_written_in_bounded_runs() -> None:
    body = "x" * 1000
    messages = [json.dumps({"i": i, "pad": body}) for i in range(300)]
    total = sum(map(len, messages))
    async with outbox_server(messages) as (url, seen):
        got = await receive(url, len(messages))
    assert [m["i"] for m in got] == list(range(300))
    (writes,) = seen
    framed = sum(len(text_frame(m.encode())) for m in messages)
    runs = writes.sizes[:-1] if sum(writes.sizes[:-1]) == framed else writes.sizes  # - close
    assert sum(runs) == framed
    # Each run stops at the first message that reaches WRITE_RUN_CHARS: ~65 of these.
    assert total // (WRITE_RUN_CHARS + 1100) <= len(runs) <= total // WRITE_RUN_CHARS + 1
    assert max(runs) <= WRITE_RUN_CHARS + 1100 + 4 * 66
