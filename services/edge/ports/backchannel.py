"""Server → client requests with ``zc-out-N`` ids (SPEC §6).

The ids, the pending futures and the routing of answers are the connection's
JSON-RPC peer's (``services.common.jsonrpc``, configured with ``zc-out-N`` ids
in ``services.edge.dialect.dispatch``), so a client request that happens to use
``"zc-out-0"`` as its own id is still served as a request. This module says
how an outbound request ends, in the terms the relay decides on: a result, an
error answer, a timeout, or the client going away. A request the edge stops
waiting for (a timeout, or the turn or the adapter withdrew it) is withdrawn
from the client with ``$/cancel_request`` (the peer is configured so), so the
client can close the question it still shows.
"""

from __future__ import annotations

from typing import Any, Protocol

from services.common.jsonrpc import JsonRpcError, JsonRpcPeer
from services.common.protocol import (
    INTERNAL_ERROR,
)


class BackChannelError(Exception):
    """An outbound request got no usable answer (error, timeout, client gone)."""


class ClientGone(BackChannelError):
    """The connection closed before the client answered."""


class BackChannelTimeout(BackChannelError):
    """No answer within ``wait_secs``."""


class ClientErrorAnswer(BackChannelError):
    """The client answered with a JSON-RPC error (its code, message and data are kept)."""

    def __init__(self, message: str, code: int = INTERNAL_ERROR, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class Asking(Protocol):
    """What a relay needs of a back-channel: a request that is answered, or fails with a
    :class:`BackChannelError` (a client connection's :class:`BackChannel`, or the relay of
    a session run for another one, ``services.edge.sessions.hosted_port``)."""

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Ask and wait for the answer."""


class BackChannel:
    """The outbound requests of one client connection."""

    def __init__(self, peer: JsonRpcPeer) -> None:
        self._peer = peer

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Send a request to the client and wait for its result.

        Raises a :class:`BackChannelError` subclass when the answer is an
        error, does not come within ``wait_secs`` seconds, or the client left.
        """
        try:
            return await self._peer.request(method, params, wait_secs)
        except TimeoutError:
            raise BackChannelTimeout(f"no answer to {method} within {wait_secs:g}s") from None
        except JsonRpcError as exc:
            raise ClientErrorAnswer(exc.message, exc.code, exc.data) from None
        except (ConnectionError, OSError) as exc:
            raise ClientGone(f"cannot reach client: {exc}") from None

    def close(self) -> None:
        """The client went away: fail every pending request, refuse new ones."""
        self._peer.close_outbound(lambda: ClientGone("client connection closed"))
