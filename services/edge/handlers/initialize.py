"""SPEC §2: ``initialize`` and ``authenticate``."""

from __future__ import annotations

from typing import Any

import grpc
import orjson

from acpgate.session.v1 import session_pb2
from services.common.protocol import AGENT_KIND_BUILTIN, META_ZEROCLAW, PROTOCOL_VERSION
from services.edge.adapter_caps import AdapterCaps
from services.edge.dispatch import DialectConnection


def _prompt_capabilities(agent: session_pb2.ResolvedAgent | None) -> dict[str, bool]:
    """SPEC §2's prompt capabilities, plus image/audio when the default agent takes them.

    What an external adapter advertised at its last start (recorded by the
    session service) is passed on; the built-in agent keeps SPEC §4, where
    image and audio blocks are ignored. ``embeddedContext`` is always on: an
    adapter without it gets embedded resources as SPEC §4 text and uploads.
    """
    caps = AdapterCaps()
    if agent is not None and agent.kind != AGENT_KIND_BUILTIN and agent.adapter_capabilities_json:
        try:
            caps = AdapterCaps.from_agent_capabilities(orjson.loads(agent.adapter_capabilities_json))
        except orjson.JSONDecodeError:
            pass
    return {"image": caps.image, "audio": caps.audio, "embeddedContext": True}


async def initialize(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §2: always protocol 1; remembers the client's capabilities; image/audio as the
    connection's default agent takes them."""
    caps = params.get("clientCapabilities")
    conn.client_capabilities = caps if isinstance(caps, dict) else {}
    rt = conn.runtime
    zeroclaw: dict[str, Any] = {}
    # The built-in agent speaks MCP over HTTP and SSE too (issue 16); what another
    # ACP agent supports is unknown until it runs, so only stdio is promised for it.
    mcp_remote = False
    agent: session_pb2.ResolvedAgent | None = None
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
            "promptCapabilities": _prompt_capabilities(agent),
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
