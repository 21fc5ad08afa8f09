"""Several outgoing text messages of one WebSocket connection in one socket write (SPEC §11).

Every relayed JSON-RPC message is still its own text frame; what changes is how
they reach the socket. ``ServerConnection.send`` costs ~10 µs of CPU per frame
on its own (an async context manager, a ``Frame`` object, and one
``transport.write`` — one ``send(2)`` on an idle socket — per frame), which was
about half of the gateway's CPU per relayed update (bench/PROFILE.md). A
:class:`TextFrames` writes a run of messages that are already queued as one
``transport.write``: frames are built directly (RFC 6455 §5.2: a server's
frames are unmasked) when no extension is negotiated, through websockets'
protocol object when one is (permessage-deflate must encode each frame), and
flow control stays websockets' own (``drain`` waits while the transport is
above its write limit). Nothing waits to fill a run: the pump takes only what
is queued when it wakes (``services.edge.transport.outqueue``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

__all__ = ["TextFrames", "text_frame"]

#: FIN + opcode 1 (text): the first header byte of every unfragmented text frame.
_FIN_TEXT = 0x81
_LEN16 = struct.Struct("!BBH")
_LEN64 = struct.Struct("!BBQ")
#: One-byte headers for the payload lengths that fit in the second header byte.
_SHORT_HEADERS = tuple(bytes((_FIN_TEXT, n)) for n in range(126))


def text_frame(payload: bytes) -> bytes:
    """One unmasked, unfragmented, uncompressed text frame carrying ``payload``."""
    size = len(payload)
    if size < 126:
        return _SHORT_HEADERS[size] + payload
    if size < 65536:
        return _LEN16.pack(_FIN_TEXT, 126, size) + payload
    return _LEN64.pack(_FIN_TEXT, 127, size) + payload


class TextFrames:
    """Writes runs of text messages to one websockets server connection, one write per run.

    :meth:`write` raises :class:`~websockets.exceptions.ConnectionClosed` once the
    connection is closing or closed, as ``ServerConnection.send`` does.
    """

    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws

    async def write(self, messages: Sequence[str]) -> None:
        """Send ``messages`` in order, one text frame each, then wait while the socket is full."""
        ws = self._ws
        protocol = ws.protocol
        if protocol.state is not State.OPEN:
            # Closing or closed: websockets' own send waits for the close and raises.
            for message in messages:
                await ws.send(message)
            return
        ws.send_data()  # whatever websockets itself queued goes first (normally nothing)
        if protocol.extensions:
            for message in messages:
                protocol.send_text(message.encode())
            frames = protocol.data_to_send()
        else:
            frames = [text_frame(message.encode()) for message in messages]
        try:
            ws.transport.write(b"".join(frames))
            await ws.drain()
        except Exception as exc:  # what send() does on a failed write: end the connection
            ws.transport.abort()
            raise ConnectionClosed(None, None) from exc
