"""One HTTP exchange as every route sees it, whatever the wire: HTTP/1.1 or HTTP/2.

:class:`HttpRequest` is a request read whole (bodies are small JSON-RPC messages,
bounded by ``[gateway] max_frame_bytes``); :class:`HttpResponse` is written in
pieces — a JSON answer at once, an SSE stream for as long as the client reads
it. ``write`` waits while the peer does not take what was written (TCP and
HTTP/2 flow control), so a stream's writer feels a slow reader, and raises
:class:`ConnectionError` once the client is gone (``closed`` is set then too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

__all__ = ["Headers", "HttpRequest", "HttpResponse", "respond"]


class Headers:
    """Request headers by lowercase name; ``get`` gives the first value of a name."""

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self.items: list[tuple[str, str]] = [(k.lower(), v) for k, v in items]
        self._first: dict[str, str] = {}
        for key, value in self.items:
            self._first.setdefault(key, value)

    def get(self, name: str) -> str | None:
        """The first value of ``name`` (any case), or None."""
        return self._first.get(name.lower())

    def get_all(self, name: str) -> list[str]:
        """Every value of ``name`` (any case), in order."""
        key = name.lower()
        return [v for k, v in self.items if k == key]

    def tokens(self, name: str) -> set[str]:
        """The comma-separated tokens of every ``name`` header, lowercased (Connection,
        Upgrade, Accept without parameters)."""
        out: set[str] = set()
        for value in self.get_all(name):
            out.update(t.split(";", 1)[0].strip().lower() for t in value.split(","))
        out.discard("")
        return out


@dataclass
class HttpRequest:
    """A request read whole."""

    method: str
    #: The request target as sent: path and query.
    target: str
    headers: Headers
    body: bytes = b""
    #: "1.1" or "2".
    http_version: str = "1.1"
    #: The peer, ``host:port``, for logs.
    remote: str = "?"
    tls: bool = False
    path: str = field(init=False)
    query: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        self.path = parts.path
        self.query = parse_qs(parts.query, keep_blank_values=True)


class HttpResponse(Protocol):
    """The answer to one request, written by the route that handles it."""

    #: Set once the client is gone (the TCP connection closed, the HTTP/2 stream reset).
    closed: asyncio.Event

    @property
    def started(self) -> bool:
        """True once the status line and headers were sent."""
        ...

    async def start(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """Send the status and headers (no Content-Length: the body is streamed)."""
        ...

    async def write(self, data: bytes) -> None:
        """Send body bytes; waits while the peer does not read; ConnectionError once gone."""
        ...

    async def end(self, data: bytes = b"") -> None:
        """Send the last body bytes and end the response."""
        ...

    def abort(self) -> None:
        """Drop the response (and what waits to be written): the client is cut off."""
        ...


async def respond(response: HttpResponse, status: int, body: bytes | str = b"",
                  content_type: str = "text/plain; charset=utf-8",
                  headers: Sequence[tuple[str, str]] = ()) -> None:
    """A complete response: status, headers, ``body``. A client already gone is no error."""
    data = body.encode() if isinstance(body, str) else body
    head = [*headers, ("content-length", str(len(data)))]
    if data or status not in (202, 204, 304):
        head.append(("content-type", content_type))
    try:
        await response.start(status, head)
        await response.end(data)
    except ConnectionError:
        pass
