"""SPEC §2: ``initialize`` and ``authenticate``."""

from __future__ import annotations

from typing import Any

import grpc

from acpgate.session.v1 import session_pb2
from services.common.acp.capabilities import agent_capabilities
from services.common.acp.schema import AgentCapabilities, ClientCapabilities, InitializeResponse
from services.common.acp.wire import AcpDecodeError
from services.common.protocol import AGENT_KIND_BUILTIN, META_ZEROCLAW, PROTOCOL_VERSION
from services.edge.adapter_caps import recorded_capabilities
from services.edge.dispatch import DialectConnection
from services.edge.mcp_admission import client_mcp_rules


def read_client_capabilities(params: dict[str, Any]) -> ClientCapabilities:
    """The client's ``clientCapabilities``; none at all (or not an object) reads as the defaults."""
    try:
        return ClientCapabilities.from_json(params.get("clientCapabilities") or {})
    except AcpDecodeError:
        return ClientCapabilities()


def default_agent_takes(agent: session_pb2.ResolvedAgent | None) -> AgentCapabilities:
    """What the connection's default agent takes in prompts and MCP servers.

    The built-in agent speaks MCP over HTTP and SSE (issue 16) and keeps SPEC §4,
    where image and audio blocks are ignored. An external adapter gets prompts
    and ``mcpServers`` as the client sent them, so what its adapter advertised
    at its last start (recorded by the session service) is passed on — nothing
    until it first ran. ``embeddedContext`` is always on either way: an adapter
    without it gets embedded resources as SPEC §4 text and uploads.
    """
    if agent is None:
        return AgentCapabilities()
    if agent.kind == AGENT_KIND_BUILTIN:
        return agent_capabilities(load_session=False, mcp_http=True, mcp_sse=True)
    return recorded_capabilities(agent.adapter_capabilities_json)


async def initialize(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §2: always protocol 1; remembers the client's capabilities; image/audio and
    MCP transports as the connection's default agent takes them (MCP ones only as far as
    ``[gateway] client_mcp_servers`` lets a remote client pass them)."""
    conn.client_capabilities = read_client_capabilities(params)
    rt = conn.runtime
    zeroclaw: dict[str, Any] = {}
    agent: session_pb2.ResolvedAgent | None = None
    try:
        agent = await rt.session_stub.ResolveAgent(session_pb2.ResolveAgentRequest(
            connection_default=conn.default_agent))
        if agent.default_model:
            zeroclaw["defaultModel"] = agent.default_model
    except grpc.aio.AioRpcError:
        pass  # no resolvable default agent: defaultModel omitted
    takes = default_agent_takes(agent)
    # Never promise a remote client what the gateway would refuse (issue 23).
    mcp_http = client_mcp_rules(conn).allows_http
    zeroclaw["maxSessions"] = rt.cfg.acp.max_sessions
    zeroclaw["sessionTimeoutSecs"] = rt.cfg.acp.session_timeout_secs
    persistent = rt.persistent
    return InitializeResponse(
        protocol_version=PROTOCOL_VERSION,
        agent_capabilities=agent_capabilities(
            load_session=persistent, resume=persistent, close=persistent,
            list_sessions=persistent, delete=persistent, additional_directories=persistent,
            fork=persistent,  # acpgate forks any agent's sessions itself (issue 25)
            image=takes.prompt_capabilities.image, audio=takes.prompt_capabilities.audio,
            mcp_http=takes.mcp_capabilities.http and mcp_http,
            mcp_sse=takes.mcp_capabilities.sse and mcp_http),
        agent_info=rt.implementation,
        auth_methods=[],
        meta={META_ZEROCLAW: zeroclaw},
    ).to_json()


async def authenticate(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """No auth methods are advertised; authenticate is a no-op."""
    return {}
