"""What an edge session needs of the client it serves: :class:`ClientPort`.

A client connection (``services.edge.dialect.dispatch.DialectConnection``) is one; so is
the stand-in of a session the edge runs for another one
(``services.edge.sessions.hosted_port.HostedPort``), whose requests go up to its host's client.
"""

from __future__ import annotations

from typing import Any, Protocol

from services.common.acp.schema import ClientCapabilities
from services.edge.ports.backchannel import Asking

__all__ = ["ClientPort"]


class ClientPort(Protocol):
    """The owning client connection, as a session sees it (or the session it runs for)."""

    remote: bool  # a gateway client, not the local stdio user (its MCP servers)
    #: An agent's requests and notifications of methods acpgate does not know are passed to
    #: this port's client (a client connection; not the stand-in of a hosted session).
    passes_unknown: bool
    #: How long the sessions of this port outlive it, detached; 0: they do not.
    detach_grace_secs: float

    @property
    def client_capabilities(self) -> ClientCapabilities:
        """What the client said it can do in ``initialize`` (passed on to adapters)."""

    @property
    def backchannel(self) -> Asking:
        """Requests to the human behind the port (permission, elicitation)."""

    async def send_many(self, lines: list[str]) -> None:
        """Write several lines/frames to the client, in order, with nothing in between."""

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """A session's adapter notification for the human behind the port
        (``elicitation/complete``); a gone client raises ConnectionError."""
