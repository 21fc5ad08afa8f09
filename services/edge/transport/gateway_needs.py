"""What the gateway needs of the rest of the edge: the runtime, the dialect, a session lookup.

``services.edge.transport.ws_server.EdgeServer`` takes these; the real ones are
``services.edge.transport.connection`` (runtime, ``serve_connection``) and
``services.edge.transport.streamable.dialect.session_lookup``; tests pass stand-ins.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from services.edge.caller import Caller
from services.edge.metrics import Metrics

__all__ = ["RuntimeLike", "ServeConnection", "SessionLookup"]


class RuntimeLike(Protocol):
    """What the gateway needs of ``services.edge.transport.connection.EdgeRuntime``."""

    metrics: Metrics


class ServeConnection(Protocol):
    """The shape of ``services.edge.transport.connection.serve_connection``."""

    def __call__(
        self,
        runtime: Any,
        incoming: AsyncIterator[str],
        send: Callable[[str], Awaitable[None]],
        *,
        default_agent: str = "",
        caller: Caller,
        remote: bool = False,
        send_many: Callable[[list[str]], Awaitable[None]] | None = None,
        revoked: asyncio.Event | None = None,
        stopping: asyncio.Event | None = None,
    ) -> Awaitable[None]:
        """Serve one connection until ``incoming`` ends, or — once ``stopping`` is set —
        until its turns are cancelled and what it read is answered."""
        ...


#: True when a caller may name a stored session (``Acp-Session-Id`` before ``session/load``).
SessionLookup = Callable[[Caller, str], Awaitable[bool]]
