"""The front door of one listening socket: every protocol of the gateway on one port.

:func:`serve_front_door` returns a ``websockets`` :class:`~websockets.asyncio.server.Server`
— ``close``, ``connections`` and ``wait_closed`` as websockets defines them, so the
WebSocket side of ``services.edge.transport.ws_server`` is unchanged — whose asyncio server
runs an :class:`~.http1.Http1Connection` per accepted connection instead of a
WebSocket one. That protocol answers HTTP/1.1 and HTTP/2 itself and hands a
WebSocket upgrade on ``/acp`` to :func:`_handoff`, which builds the very
:class:`~websockets.asyncio.server.ServerConnection` ``websockets.serve`` would
have, feeds it the bytes read so far and lets it run the handshake (with
``process_request``/``process_response``) and the connection. The relay thus
costs what it cost before (measured: bench, gateway rows).

Why not hypercorn or granian: measured on this project's firehose (one JSON-RPC
update per text frame, the same client), websockets served 90–105 k updates/s,
hypercorn's ASGI WebSocket 45–49 k, granian's 26–31 k — each below what today's
gateway relays (see docs/contracts.md, "The remote transport").
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, cast

from websockets.asyncio.server import Server, ServerConnection
from websockets.extensions.permessage_deflate import enable_server_permessage_deflate
from websockets.http11 import Request, Response
from websockets.protocol import OPEN
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from services.common.config import Config
from services.common.logs import get_logger
from services.edge.transport.balance import Balancer
from services.edge.transport.http1 import Http1Connection
from services.edge.transport.wiring import App, Wiring

__all__ = ["ALPN_PROTOCOLS", "FrontDoor", "WebSocketOptions", "serve_front_door", "tls_context"]

#: What TLS offers, preferred first: HTTP/2 for Streamable HTTP, HTTP/1.1 for the rest
#: (a WebSocket client that offers ALPN asks for http/1.1).
ALPN_PROTOCOLS: Final = ("h2", "http/1.1")
#: Seconds a WebSocket handshake (and a TLS one) may take.
OPEN_TIMEOUT: Final = 10.0

log = get_logger("edge.ws")

ProcessRequest = Callable[[ServerConnection, Request], Awaitable[Response | None]]
ProcessResponse = Callable[[ServerConnection, Request, Response], Response | None]


def tls_context(cfg: Config) -> ssl.SSLContext | None:
    """A server TLS context from ``[gateway.tls]`` (ALPN: h2, http/1.1), or ``None``."""
    tls = cfg.gateway.tls
    if not tls.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    context.set_alpn_protocols(list(ALPN_PROTOCOLS))
    return context


@dataclass(frozen=True)
class WebSocketOptions:
    """What ``websockets.serve`` was given for ``/acp`` (see ``services.edge.transport.ws_server``)."""

    handler: Callable[[ServerConnection], Awaitable[None]]
    process_request: ProcessRequest
    process_response: ProcessResponse
    select_subprotocol: Callable[[ServerConnection, Any], Subprotocol | None]
    max_size: int | None
    ping_interval: float | None
    close_timeout: float
    compression: bool


@dataclass
class FrontDoor:
    """One listening socket's servers: the websockets bookkeeping and the HTTP side."""

    server: Server
    wiring: Wiring

    def close_http(self) -> None:
        """Close the HTTP connections: idle ones now, busy ones after their response."""
        for conn in list(self.wiring.connections):
            conn.close_gracefully()


def _handoff(server: Server, ws: WebSocketOptions) -> Callable[[asyncio.Transport, bytes], None]:
    """The WebSocket side of a transport whose bytes so far are an upgrade request."""
    extensions = enable_server_permessage_deflate(None) if ws.compression else None

    def handoff(transport: asyncio.Transport, raw: bytes) -> None:
        connection: ServerConnection

        def select(protocol: ServerProtocol, offered: Any) -> Subprotocol | None:
            return ws.select_subprotocol(connection, offered)

        protocol = ServerProtocol(extensions=extensions, select_subprotocol=select,
                                  max_size=ws.max_size, logger=server.logger)
        connection = ServerConnection(protocol, server, ping_interval=ws.ping_interval,
                                      ping_timeout=ws.ping_interval,
                                      close_timeout=ws.close_timeout)
        transport.set_protocol(connection)
        connection.connection_made(transport)
        connection.data_received(raw)

    return handoff


def _connection_handler(server_ref: list[Server], ws: WebSocketOptions
                        ) -> Callable[[ServerConnection], Coroutine[Any, Any, None]]:
    """What ``websockets.serve`` runs per connection: handshake, keepalive, the handler."""

    async def handle(connection: ServerConnection) -> None:
        server = server_ref[0]
        try:
            async with asyncio.timeout(OPEN_TIMEOUT):
                await connection.handshake(ws.process_request, ws.process_response,
                                           server_header=None)
            if connection.protocol.state is not OPEN:
                connection.transport.abort()
                return
            server.all_connections.add(connection)
            connection.start_keepalive()
            try:
                async with connection:
                    await ws.handler(connection)
            except Exception:
                log.exception("ws_handler_failed")
            finally:
                server.all_connections.discard(connection)
        except Exception:
            connection.transport.abort()  # a failed or timed-out handshake leaks nothing
        finally:
            task = asyncio.current_task()
            if task is not None:
                server.handler_tasks.discard(task)

    return handle


async def serve_front_door(sock: socket.socket, *, app: App, websocket_path: str,
                           ws: WebSocketOptions, max_body: int,
                           tls: ssl.SSLContext | None,
                           balancer: Balancer | None = None) -> FrontDoor:
    """Serve ``sock`` (already listening): HTTP/1.1, HTTP/2 and WebSocket on ``/acp``;
    with a ``balancer`` (one of several edge workers), through its door: accepting only
    while this worker holds no more than its share (``services.edge.transport.balance``)."""
    server_ref: list[Server] = []
    wiring = Wiring(app=app, websocket=lambda t, raw: None,
                    websocket_paths=frozenset({websocket_path}), max_body=max_body)

    async def create_server() -> asyncio.Server:
        if balancer is not None:
            door = balancer.door(sock, lambda: Http1Connection(wiring), tls, OPEN_TIMEOUT)
            return cast(asyncio.Server, door)  # the part of a Server websockets uses
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {}
        if tls is not None:
            extra = {"ssl": tls, "ssl_handshake_timeout": OPEN_TIMEOUT}
        return await loop.create_server(lambda: Http1Connection(wiring), sock=sock, **extra)

    server = Server(create_server, _connection_handler(server_ref, ws))
    server_ref.append(server)
    wiring.websocket = _handoff(server, ws)
    await server  # creates (and starts) the asyncio server
    return FrontDoor(server, wiring)
