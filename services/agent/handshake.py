"""The built-in agent's ``initialize``: what its client offers, what the agent advertises.

The client's ``clientCapabilities`` decide two things for every later session of
the connection: whether questions may go out as form-mode ``elicitation/create``,
and whether the session tools are offered (the acpgate edge serves their
extension methods and says so in ``_meta.acpgate.sessionTools``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.acp.capabilities import agent_capabilities
from services.common.acp.schema import ClientCapabilities, Implementation, InitializeResponse
from services.common.acp.wire import AcpDecodeError
from services.common.protocol import (
    META_ACPGATE,
    META_SESSION_TOOLS,
    META_WARNINGS,
    PROTOCOL_VERSION,
)

__all__ = ["AGENT_NAME", "ClientOffer", "initialize_result", "read_client_offer"]

AGENT_NAME = "acpgate-agent"


@dataclass(frozen=True)
class ClientOffer:
    """What the client's ``initialize`` lets the agent use."""

    #: Questions may be asked with form-mode ``elicitation/create``.
    elicitation: bool = False
    #: The client serves the session tools' extension methods (the acpgate edge).
    session_tools: bool = False


def read_client_offer(params: dict[str, Any]) -> ClientOffer:
    """The offer in ``initialize`` params; unreadable capabilities offer nothing."""
    try:
        caps = ClientCapabilities.from_json(params.get("clientCapabilities") or {})
    except AcpDecodeError:
        caps = ClientCapabilities()
    elicitation = caps.elicitation
    ours = (caps.meta or {}).get(META_ACPGATE)
    return ClientOffer(
        # Form mode unless the client advertised URL mode only.
        elicitation=elicitation is not None and (
            elicitation.form is not None or elicitation.url is None),
        session_tools=isinstance(ours, dict) and ours.get(META_SESSION_TOOLS) is True,
    )


def initialize_result(alias: str, version: str, warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The agent's ``initialize`` result as alias ``alias``, reporting ``version``, and
    what is wrong with its configuration (``_meta.acpgate.warnings``: the edge
    logs them at session start, where the operator looks)."""
    return InitializeResponse(
        protocol_version=PROTOCOL_VERSION,
        # No store of our own: a session/load after a restart could only fail, so
        # clients (Zed) must not offer it. resume stays: it is how the edge seeds a
        # session (with _meta.acpgate.history), and it works for ids this process knows.
        # MCP: stdio always; streamable HTTP and SSE through the MCP SDK's clients.
        agent_capabilities=agent_capabilities(load_session=False, resume=True, close=True,
                                              mcp_http=True, mcp_sse=True),
        agent_info=Implementation(name=AGENT_NAME, title=f"acpgate built-in agent ({alias})",
                                  version=version),
        auth_methods=[],
        meta={META_ACPGATE: {META_WARNINGS: list(warnings)}} if warnings else None,
    ).to_json()
