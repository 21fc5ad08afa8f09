"""SPEC §2: ``initialize`` and ``authenticate``."""

from __future__ import annotations

from typing import Any

import grpc

from acpgate.session.v1 import session_pb2
from services.common.protocol import AGENT_KIND_BUILTIN, META_ZEROCLAW, PROTOCOL_VERSION
from services.edge.dispatch import DialectConnection


async def initialize(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §2: always protocol 1; remembers the client's capabilities."""
    caps = params.get("clientCapabilities")
    conn.client_capabilities = caps if isinstance(caps, dict) else {}
    rt = conn.runtime
    zeroclaw: dict[str, Any] = {}
    # The built-in agent speaks MCP over HTTP and SSE too (issue 16); what another
    # ACP agent supports is unknown until it runs, so only stdio is promised for it.
    mcp_remote = False
    try:
        agent = await rt.session_stub.ResolveAgent(session_pb2.ResolveAgentRequest(
            connection_default=conn.default_agent))
        if agent.default_model:
            zeroclaw["defaultModel"] = agent.default_model
        mcp_remote = agent.kind == AGENT_KIND_BUILTIN
    except grpc.aio.AioRpcError:
        pass  # no resolvable default agent: defaultModel omitted
    zeroclaw["maxSessions"] = rt.cfg.acp.max_sessions
    zeroclaw["sessionTimeoutSecs"] = rt.cfg.acp.session_timeout_secs
    persistent = rt.persistent
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": persistent,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": mcp_remote, "sse": mcp_remote},
            "sessionCapabilities": ({"resume": {}, "close": {}, "list": {}}
                                    if persistent else {}),
        },
        "agentInfo": rt.implementation,
        "authMethods": [],
        "_meta": {META_ZEROCLAW: zeroclaw},
    }


async def authenticate(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """No auth methods are advertised; authenticate is a no-op."""
    return {}
