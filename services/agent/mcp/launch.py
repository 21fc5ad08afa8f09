"""What the session side of MCP knows without the SDK: launch settings, states, failures.

Importing the ``mcp`` SDK costs about two seconds; the agent loads it only when a
session actually has MCP servers (:mod:`services.agent.mcp.servers`), so this
module must not import it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Launch", "McpCallFailed", "McpUnavailable", "State"]


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


class State(enum.Enum):
    """Where a connection is in its life (see :mod:`services.agent.mcp.connection`)."""

    IDLE = "idle"
    STARTING = "starting"
    READY = "ready"
    LOST = "lost"
    FAILED = "failed"
    CLOSED = "closed"


class McpUnavailable(Exception):
    """The server cannot take calls now; ``str(exc)`` is the sentence for the model."""


class McpCallFailed(Exception):
    """A call failed (error answer, timeout, the server went away); ``str(exc)`` says how."""
