"""A real local HTTP/1.1 server standing in for a model provider, scripted per test.

Each request pops the next :class:`Reply` (or, given a ``responder``, gets the
reply it computes from the request); the server records every request (path,
headers, JSON body) so tests can check what the provider sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

import orjson


@dataclass
class Reply:
    """One scripted response: status, headers and body chunks (sent one by one)."""

    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    #: Close the connection without any response (a connection error for the client).
    drop: bool = False
    #: After the chunks, keep the stream open until the client hangs up.
    stall: bool = False


def sse(*events: Any, event_names: list[str] | None = None, done: bool = False) -> Reply:
    """An SSE reply: one ``data:`` frame per event (dicts are JSON-encoded)."""
    chunks: list[bytes] = []
    for i, ev in enumerate(events):
        data = ev if isinstance(ev, str) else orjson.dumps(ev).decode()
        name = event_names[i] if event_names else None
        prefix = f"event: {name}\n" if name else ""
        chunks.append(f"{prefix}data: {data}\n\n".encode())
    if done:
        chunks.append(b"data: [DONE]\n\n")
    return Reply(200, chunks, {"Content-Type": "text/event-stream"})


def anthropic_sse(*events: dict[str, Any]) -> Reply:
    """An Anthropic-style SSE reply: ``event: <type>`` + ``data:`` per event."""
    return sse(*events, event_names=[str(e["type"]) for e in events])


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    """A plain JSON reply (errors)."""
    return Reply(status, [orjson.dumps(body)], {"Content-Type": "application/json",
                                                 **(headers or {})})


@dataclass
class Recorded:
    """One request as received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class LoopbackServer:
    """An HTTP server on a free 127.0.0.1 port for the ``async with`` body; ``.url``.

    Subclasses implement ``_handle`` (one connection).
    """

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class FakeProviderServer(LoopbackServer):
    """``async with FakeProviderServer([...]) as srv: srv.url``."""

    def __init__(self, replies: list[Reply],
                 responder: Callable[[Recorded], Reply] | None = None) -> None:
        super().__init__()
        self.replies = list(replies)
        #: Computes the reply to a request once the scripted replies are used up.
        self.responder = responder
        self.requests: list[Recorded] = []
        #: Set when a client hung up on a stalled stream.
        self.client_hung_up = asyncio.Event()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
            if request is None:
                return
            self.requests.append(request)
            if self.replies:
                reply = self.replies.pop(0)
            elif self.responder is not None:
                reply = self.responder(request)
            else:
                reply = json_reply(500, {"error": "unscripted"})
            if reply.drop:
                return
            await write_head(writer, reply.status, reply.headers)
            for chunk in reply.chunks:
                await write_chunk(writer, chunk)
            if reply.stall:
                await reader.read()  # returns b"" once the client closes the connection
                self.client_hung_up.set()
                return
            await write_chunk(writer, b"")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> Recorded | None:
    """One HTTP/1.1 request (JSON body decoded when it is JSON), or None at EOF."""
    request_line = (await reader.readline()).decode().strip()
    if not request_line:
        return None
    method, path, _ = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    while (line := (await reader.readline()).decode().strip()):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    raw = b""
    if "content-length" in headers:
        raw = await reader.readexactly(int(headers["content-length"]))
    body: Any = None
    if raw:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw
    return Recorded(method, path, headers, body)


async def write_head(writer: asyncio.StreamWriter, status: int, headers: dict[str, str]) -> None:
    """A chunked response's status line and headers (the connection closes after it)."""
    head = [f"HTTP/1.1 {status} X", "Transfer-Encoding: chunked", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    await writer.drain()


async def write_chunk(writer: asyncio.StreamWriter, chunk: bytes) -> None:
    """One chunk of a chunked body; ``b""`` ends the body."""
    writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    await writer.drain()
