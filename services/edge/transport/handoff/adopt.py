"""The front door's side of a hand-over: resume a connection a sibling accepted.

The handed-in socket becomes an :class:`~services.edge.transport.http1.Http1Connection`
of this worker's listener, fed first the bytes the sibling had read (the request
head, and what followed it): the request is then answered — a WebSocket upgrade
handed to the WebSocket server, a Streamable HTTP request routed — exactly as if
this worker had accepted the connection itself.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from services.edge.transport.http1 import Http1Connection
from services.edge.transport.wiring import Wiring

__all__ = ["adopt_connection"]


class _Resumed(Http1Connection):
    """An :class:`Http1Connection` whose first bytes were read by another worker."""

    def __init__(self, wiring: Wiring, pre_read: bytes) -> None:
        super().__init__(wiring)
        self._pre_read = pre_read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start as any connection, then read what the sibling had read (before any byte
        the socket still holds: the transport reads only after this returns)."""
        super().connection_made(transport)
        data, self._pre_read = self._pre_read, b""
        if data:
            self.data_received(data)


async def adopt_connection(wiring: Wiring, client: socket.socket, pre_read: bytes,
                           track: Callable[[asyncio.BaseTransport], None] | None = None) -> None:
    """Serve ``client`` (a TCP connection handed in) on this worker's listener ``wiring``;
    ``track``: told of its transport (this worker's count of the connections it holds)."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(lambda: _Resumed(wiring, pre_read), client)
    if track is not None:
        track(transport)
