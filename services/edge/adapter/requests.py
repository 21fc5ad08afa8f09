"""What the edge sends an adapter to set a session up, and how it reads a prompt's result.

Pure builders of ACP params (docs/contracts.md "Edge ↔ adapter"): the edge's
``initialize`` (what the client and the edge will honour, and the session tools),
the params ``session/new``, ``load`` and ``resume`` share, the ``clientMcp`` part of
``_meta.acpgate`` for the built-in agent; :class:`~services.edge.adapter.client.AdapterClient`
sends them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from services.common.acp.schema import (
    ClientCapabilities,
    Implementation,
    InitializeRequest,
    PromptResponse,
)
from services.common.acp.wire import AcpDecodeError
from services.common.mcp_policy import ClientMcpRules
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    META_ACPGATE,
    META_CLIENT_MCP,
    META_SESSION_TOOLS,
    PROTOCOL_VERSION,
    STOP_END_TURN,
)
from services.edge.adapter.caps import client_capabilities
from services.edge.backends.session_types import ResolvedAgent

__all__ = ["agent_secrets", "client_mcp_meta", "expected_initialize", "initialize_request",
           "read_prompt_result", "setup_params"]


def read_prompt_result(result: Any) -> PromptResponse:
    """An adapter's ``session/prompt`` result; one without a stop reason ended the turn."""
    try:
        return PromptResponse.from_json(result)
    except AcpDecodeError:
        return PromptResponse(stop_reason=STOP_END_TURN)


def initialize_request(client: ClientCapabilities, client_info: Implementation,
                       policy: SecurityPolicy) -> InitializeRequest:
    """The edge's ``initialize`` toward an adapter, for a client that can do ``client``,
    promising what the client and the edge will honour under ``policy``
    (:func:`services.edge.adapter.caps.client_capabilities`), and that the edge serves the
    session tools' extension methods."""
    caps = dataclasses.replace(client_capabilities(client, policy),
                               meta={META_ACPGATE: {META_SESSION_TOOLS: True}})
    return InitializeRequest(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=caps,
        client_info=client_info,
    )


def expected_initialize(client: ClientCapabilities, client_info: Implementation,
                        autonomy: str) -> dict[str, Any]:
    """The ``initialize`` params :func:`initialize_request` will give for a session of
    ``autonomy`` (of its policy, only the autonomy level shapes them): sent ahead of the
    policy by an early take, checked against the real one before the adapter is used."""
    return initialize_request(client, client_info,
                              SecurityPolicy(workspace_dir="", autonomy=autonomy)).to_json()


def agent_secrets(agent: ResolvedAgent) -> tuple[str, ...]:
    """The configured environment values of ``agent`` (scrubbed from its stderr)."""
    return tuple(agent.env.values())


def setup_params(session_id: str | None, cwd: str, mcp_servers: list[Any],
                  additional_directories: list[str] | None) -> dict[str, Any]:
    """The params session/new (no ``session_id``), load and resume share."""
    params: dict[str, Any] = {} if session_id is None else {"sessionId": session_id}
    params["cwd"] = cwd
    params["mcpServers"] = mcp_servers
    if additional_directories:
        params["additionalDirectories"] = additional_directories
    return params


def client_mcp_meta(rules: ClientMcpRules | None) -> dict[str, Any]:
    """``{"clientMcp": ...}`` of ``_meta.acpgate`` (nothing without rules)."""
    return {} if rules is None else {META_CLIENT_MCP: rules.to_meta()}
