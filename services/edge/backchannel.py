"""Server → client requests with ``zc-out-N`` ids (SPEC §6).

Correlation is per direction: this map only holds *our* outbound ids, so a
client request that happens to use ``"zc-out-0"`` as its own id never collides
with it. Every outbound request ends in exactly one way: a result, an error, a
timeout, or the client going away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from services.common.logs import get_logger
from services.common.protocol import OUTBOUND_ID_PREFIX
from services.edge.framing import request_line

log = get_logger("edge.backchannel")


class BackChannelError(Exception):
    """An outbound request got no usable answer (error, timeout, client gone)."""


class ClientGone(BackChannelError):
    """The connection closed before the client answered."""


class BackChannelTimeout(BackChannelError):
    """No answer within ``wait_secs``."""


class ClientErrorAnswer(BackChannelError):
    """The client answered with a JSON-RPC error."""


class BackChannel:
    """The outbound request map of one client connection."""

    def __init__(self, send: Callable[[str], Awaitable[None]]) -> None:
        self._send = send
        self._next = 0
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._closed = False

    def next_id(self) -> str:
        """Allocate the next ``zc-out-N`` id (N from 0 per connection)."""
        out = f"{OUTBOUND_ID_PREFIX}{self._next}"
        self._next += 1
        return out

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Send a request to the client and wait for its result.

        Raises a :class:`BackChannelError` subclass when the answer is an
        error, does not come within ``wait_secs`` seconds, or the client left.
        """
        if self._closed:
            raise ClientGone("client connection closed")
        req_id = self.next_id()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        try:
            await self._send(request_line(req_id, method, params))
            return await asyncio.wait_for(fut, wait_secs)
        except TimeoutError:
            raise BackChannelTimeout(f"no answer to {method} within {wait_secs:g}s") from None
        except (ConnectionError, OSError) as exc:
            raise ClientGone(f"cannot reach client: {exc}") from None
        finally:
            self._pending.pop(req_id, None)

    def on_response(self, message: dict[str, Any]) -> bool:
        """Route a client response to its pending request; unknown ids are dropped."""
        raw_id = message.get("id")
        key = raw_id if isinstance(raw_id, str) else str(raw_id)
        fut = self._pending.get(key)
        if fut is None or fut.done():
            log.debug("response_for_unknown_id_dropped")
            return False
        if "error" in message:
            err = message.get("error")
            detail = err.get("message") if isinstance(err, dict) else None
            fut.set_exception(ClientErrorAnswer(str(detail or "client returned an error")))
        else:
            fut.set_result(message.get("result"))
        return True

    def close(self) -> None:
        """The client went away: fail every pending request, refuse new ones."""
        self._closed = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ClientGone("client connection closed"))
