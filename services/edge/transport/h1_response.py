"""The response to the request in progress on an HTTP/1.1 connection (``h11`` events)."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any, Protocol

import h11

__all__ = ["H1Connection", "H1Response"]


class H1Connection(Protocol):
    """What a response needs of its connection."""

    def send(self, event: Any) -> None: ...

    async def drain(self, response: H1Response) -> None: ...

    def abort(self) -> None: ...


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class H1Response:
    """The response to the request in progress on an HTTP/1.1 connection."""

    def __init__(self, conn: H1Connection) -> None:
        self._conn = conn
        self.closed = asyncio.Event()
        self._started = False
        self.ended = False

    @property
    def started(self) -> bool:
        """True once the status line and headers were sent."""
        return self._started

    async def start(self, status: int, headers: Any) -> None:
        """Send the status line and headers."""
        self._started = True
        self._conn.send(h11.Response(status_code=status, reason=_reason(status),
                                     headers=[*headers, ("server", "acpgate")]))

    async def write(self, data: bytes) -> None:
        """Send body bytes (chunked when no length was given), then wait for the socket."""
        if data:
            self._conn.send(h11.Data(data=data))
        await self._conn.drain(self)

    async def end(self, data: bytes = b"") -> None:
        """Send the last bytes and end the message."""
        if data:
            self._conn.send(h11.Data(data=data))
        if not self.ended:
            self.ended = True
            self._conn.send(h11.EndOfMessage())

    def abort(self) -> None:
        """Cut the connection: an HTTP/1.1 response cannot be dropped otherwise."""
        self._conn.abort()
