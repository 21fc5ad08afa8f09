"""The incoming side of one WebSocket connection: its frames, while answers can still go out.

Reading a request is only worth it while its answer can be delivered. Once the
connection's :class:`~services.edge.transport.outqueue.Outbox` has closed — the client
went away, or stopped reading past its bound (``services.edge.transport.outqueue``) — no
further frame is read, so a client that floods requests without reading their
answers cannot grow the edge's memory: the edge hangs up on it instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from services.edge.transport.outqueue import Outbox

__all__ = ["Incoming"]


class Incoming:
    """The frames of one connection as text, while its answers can still be delivered.

    Binary frames are decoded as UTF-8. Once the outbox closed (the client went
    away, or stopped reading past its bound), no further request is read: its
    answer could only be dropped, and reading on would let the client grow the
    edge without bound.
    """

    def __init__(self, ws: ServerConnection, outbox: Outbox) -> None:
        self._ws = ws
        self._outbox = outbox
        #: Frames read so far (logged on close).
        self.count = 0

    async def frames(self) -> AsyncIterator[str]:
        """Yield frames until the connection closes or its outbox does."""
        try:
            async for frame in self._ws:
                if self._outbox.closed:
                    return
                self.count += 1
                yield frame if isinstance(frame, str) else frame.decode("utf-8", errors="replace")
        except ConnectionClosed:
            return
