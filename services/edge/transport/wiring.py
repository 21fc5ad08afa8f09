"""What the HTTP/1.1 and HTTP/2 connections of one listening socket share.

The :class:`Wiring` of a listener: the routes every request goes to, where a
WebSocket upgrade is handed, the body bound, and the live connections and
request tasks (a stopping gateway closes the former and waits for the latter).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.edge.transport.exchange import HttpRequest, HttpResponse

__all__ = ["App", "HandOff", "Wiring", "peer_name"]

#: The routes: answer one request (``services.edge.transport.routes``).
App = Callable[[HttpRequest, HttpResponse], Awaitable[None]]


class HandOff(Protocol):
    """Where a request that belongs to a sibling edge worker goes
    (``services.edge.transport.handoff``)."""

    def owner(self, request: HttpRequest) -> int:
        """The sibling worker ``request`` belongs to, or 0: answered here."""

    def hand(self, transport: asyncio.Transport, pre_read: bytes, target: int) -> None:
        """Give the connection, and what was read of it (``pre_read``), to ``target``."""


@dataclass
class Wiring:
    """The routes, the WebSocket hand-off and the bookkeeping of one listener."""

    app: App
    #: Hands a transport whose bytes so far (``raw``) are a WebSocket upgrade to the
    #: WebSocket server, which answers the handshake itself.
    websocket: Callable[[asyncio.Transport, bytes], None]
    #: Paths whose WebSocket upgrades are handed over (others are plain HTTP requests).
    websocket_paths: frozenset[str]
    #: The largest request body read (413 past it).
    max_body: int
    #: The open HTTP/1.1 and HTTP/2 connections (each has ``close_gracefully()``).
    connections: set[Any] = field(default_factory=set)
    #: The running request handlers.
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    #: With several edge workers: hands a sibling's connections over (None: answer all).
    handoff: HandOff | None = None


def peer_name(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the peer, for logs ("?" when unknown)."""
    try:
        host, port = transport.get_extra_info("peername")[:2]
    except (TypeError, ValueError):
        return "?"
    return f"{host}:{port}"
