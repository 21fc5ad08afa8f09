"""SPEC §2: ``initialize`` and ``authenticate``."""

from __future__ import annotations

from typing import Any

import grpc
import orjson

from acpgate.session.v1 import session_pb2
from services.common.protocol import AGENT_KIND_BUILTIN, META_ZEROCLAW, PROTOCOL_VERSION
from services.edge.adapter_caps import AdapterCaps
from services.edge.dispatch import DialectConnection


def _recorded(agent: session_pb2.ResolvedAgent | None) -> AdapterCaps:
    """What the default agent's adapter advertised at its last start (none: nothing)."""
    if agent is None or not agent.adapter_capabilities_json:
        return AdapterCaps()
    try:
        return AdapterCaps.from_agent_capabilities(orjson.loads(agent.adapter_capabilities_json))
    except orjson.JSONDecodeError:
        return AdapterCaps()


def _prompt_capabilities(agent: session_pb2.ResolvedAgent | None,
                         caps: AdapterCaps) -> dict[str, bool]:
    """SPEC §2's prompt capabilities, plus image/audio when the default agent takes them.

    An external adapter's recorded capabilities are passed on; the built-in
    agent keeps SPEC §4, where image and audio blocks are ignored.
    ``embeddedContext`` is always on: an adapter without it gets embedded
    resources as SPEC §4 text and uploads.
    """
    external = agent is not None and agent.kind != AGENT_KIND_BUILTIN
    return {"image": external and caps.image, "audio": external and caps.audio,
            "embeddedContext": True}


def _mcp_capabilities(agent: session_pb2.ResolvedAgent | None,
                      caps: AdapterCaps) -> dict[str, bool]:
    """MCP transports the clients' ``mcpServers`` may use with the default agent.

    The built-in agent speaks MCP over HTTP and SSE (issue 16); an external
    adapter gets ``mcpServers`` unchanged, so its recorded transports are
    passed on (none until it first ran).
    """
    if agent is not None and agent.kind == AGENT_KIND_BUILTIN:
        return {"http": True, "sse": True}
    mcp = caps.raw.get("mcpCapabilities")
    mcp = mcp if isinstance(mcp, dict) else {}
    return {"http": mcp.get("http") is True, "sse": mcp.get("sse") is True}


async def initialize(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §2: always protocol 1; remembers the client's capabilities; image/audio and
    MCP transports as the connection's default agent takes them."""
    caps = params.get("clientCapabilities")
    conn.client_capabilities = caps if isinstance(caps, dict) else {}
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
    recorded = _recorded(agent)
    zeroclaw["maxSessions"] = rt.cfg.acp.max_sessions
    zeroclaw["sessionTimeoutSecs"] = rt.cfg.acp.session_timeout_secs
    persistent = rt.persistent
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": persistent,
            "promptCapabilities": _prompt_capabilities(agent, recorded),
            "mcpCapabilities": _mcp_capabilities(agent, recorded),
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
