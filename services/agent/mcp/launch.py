"""What the session side of MCP knows without the SDK: launch settings, states, failures.

Importing the ``mcp`` SDK costs about two seconds; the agent loads it only when a
session actually has MCP servers (:mod:`services.agent.mcp.servers`), so this
module must not import it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from services.common.mcp_policy import ClientMcpRules
from services.common.mcp_servers import McpServerSpec, McpStdioServer
from services.common.net_targets import Resolver
from services.common.policy import SecurityPolicy

__all__ = ["Approve", "ClientGuard", "Launch", "McpCallFailed", "McpUnavailable", "Planned",
           "State"]

#: Asks the client whether a gateway client's stdio server may start: None = it may, else
#: the sentence saying why not (denied, no answer).
Approve = Callable[[McpStdioServer], Awaitable[str | None]]


@dataclass(frozen=True)
class ClientGuard:
    """What a gateway client's servers run under in one session: stdio ones
    confined to the session's policy and approved by the client, HTTP ones connected only
    to addresses they may reach (``services/agent/mcp/confine.py``, ``http_guard.py``)."""

    #: The session's policy in force now (autonomy, roots, forbidden paths).
    policy: Callable[[], SecurityPolicy]
    approve: Approve
    #: The kernel's Landlock ABI (0 = none: a client stdio server does not start then).
    landlock: Callable[[], int]
    #: Resolves the host of an HTTP/SSE server at connect time.
    resolve: Resolver


@dataclass(frozen=True)
class Planned:
    """One server of a session's list. ``client`` holds the rules of a gateway client's
    server; None for a trusted one (the operator's, or the local stdio user's)."""

    spec: McpServerSpec
    client: ClientMcpRules | None = None


@dataclass(frozen=True)
class Launch:
    """How one session starts its servers (the same for all of them)."""

    session_id: str
    #: The session workspace: stdio servers run there.
    cwd: str
    #: The agent's environment minus provider API keys; a server's ``env`` goes on top.
    env: Mapping[str, str]
    startup_timeout: float
    call_timeout: float
    client_version: str
    #: How a gateway client's servers run (None: the session has none).
    guard: ClientGuard | None = None


class State(enum.Enum):
    """Where a connection is in its life (see :mod:`services.agent.mcp.connection`)."""

    IDLE = "idle"
    #: A gateway client's stdio server that may not start yet (readonly, or approval due).
    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    LOST = "lost"
    FAILED = "failed"
    CLOSED = "closed"


class McpUnavailable(Exception):
    """The server cannot take calls now; ``str(exc)`` is the sentence for the model."""


class McpCallFailed(Exception):
    """A call failed (error answer, timeout, the server went away); ``str(exc)`` says how."""
