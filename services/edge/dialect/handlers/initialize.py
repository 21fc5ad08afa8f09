"""SPEC §2: ``initialize``; ``authenticate`` is the connection's agent's
(:mod:`services.edge.dialect.handlers.agent_calls`).

acpgate always answers protocol 1 and its own ``agentInfo``, with ``loadSession``
and the session capabilities it serves from its store (none without a persistent one:
``_meta.acpgate.store`` then says ``{"persistent": false, "reason": …}``). The rest follows the
connection's default agent: the built-in agent's own features (HTTP/SSE MCP
servers, no image or audio, no auth methods); an external agent's profile as it
advertised it at its last start — capabilities, ``authMethods`` and ``_meta`` —
wherever acpgate can honour or relay it (:mod:`services.edge.dialect.advertised`).
When the external agent never ran here, the connection's held adapter is started
to learn it (:mod:`services.edge.dialect.conn_agent`; the next ``session/new`` takes it).
"""

from __future__ import annotations

from typing import Any

from services.common.acp.capabilities import agent_capabilities
from services.common.acp.schema import AgentCapabilities, ClientCapabilities, InitializeResponse
from services.common.acp.v2.handshake import (
    NoVersionFits,
    negotiate,
    v2_client_info,
    v2_initialize_result,
)
from services.common.acp.v2.names import MSG_UNSUPPORTED_VERSION, PROTOCOL_V1
from services.common.acp.wire import AcpDecodeError
from services.common.attach_protocol import ATTACH_ROLES
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    META_ACPGATE,
    META_ZEROCLAW,
    PROTOCOL_VERSION,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from services.edge.adapter.caps import profile_of, recorded_capabilities, recorded_profile
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import ResolvedAgent
from services.edge.dialect.advertised import (
    V2Place,
    merged_capabilities,
    own_capabilities,
    own_session_capabilities,
    session_keys,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.agent_calls import held_adapter
from services.edge.dialect.mcp_admission import client_mcp_rules

log = get_logger("edge.initialize")


def read_client_capabilities(params: dict[str, Any]) -> ClientCapabilities:
    """The client's ``clientCapabilities``; none at all (or not an object) reads as the defaults."""
    try:
        return ClientCapabilities.from_json(params.get("clientCapabilities") or {})
    except AcpDecodeError:
        return ClientCapabilities()


def default_agent_takes(agent: ResolvedAgent | None) -> AgentCapabilities:
    """What the connection's default agent takes in prompts and MCP servers.

    The built-in agent speaks MCP over HTTP and SSE and keeps SPEC §4,
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


async def _external_profile(conn: DialectConnection,
                            agent: ResolvedAgent) -> dict[str, Any] | None:
    """The external default agent's profile: recorded, else learnt from the connection's
    held adapter (None when it cannot be started: acpgate's own answer then)."""
    profile = recorded_profile(agent.adapter_capabilities_json)
    if profile is not None:
        return profile
    try:
        held = await held_adapter(conn, agent)
    except JsonRpcError as exc:
        log.warning("default_agent_unavailable", alias=agent.alias, code=exc.code)
        return None
    return profile_of(held.client.initialize_result)


async def initialize(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """``initialize``: the version negotiated (the highest acpgate serves at or below the
    client's; none fits: -32022 with ``{requested, supported}``), then v1's answer, or the
    same answer in v2's shape — and from then on the connection speaks that version."""
    try:
        version = negotiate(params.get("protocolVersion"))
    except NoVersionFits as exc:
        raise JsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, MSG_UNSUPPORTED_VERSION.format(
            requested=exc.requested), exc.data) from None
    if version == PROTOCOL_V1 or not conn.speaks(version):
        conn.use_version(PROTOCOL_V1)
        return await initialize_v1(conn, params)
    out = await initialize_v1(conn, {"clientInfo": v2_client_info(params)})
    conn.use_version(version)
    caps = conn.dialect.capabilities
    return v2_initialize_result(
        out, version=version,
        markers=session_keys(caps, V2Place.MARKER), under_meta=session_keys(caps, V2Place.META))


async def initialize_v1(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §2: always protocol 1; remembers the client's capabilities; the rest as the
    module doc says (MCP transports only as far as ``[gateway] client_mcp_servers`` lets a
    remote client pass them). acpgate's own capabilities are those the method table gives
    the methods the connection's dialect serves."""
    conn.client_capabilities = read_client_capabilities(params)
    info = params.get("clientInfo")
    conn.client_info = info if isinstance(info, dict) else None
    rt = conn.runtime
    zeroclaw: dict[str, Any] = {}
    agent: ResolvedAgent | None = None
    try:
        agent = await rt.session_service.resolve_agent(connection_default=conn.default_agent)
        if agent.default_model:
            zeroclaw["defaultModel"] = agent.default_model
    except ServiceError:
        pass  # no resolvable default agent: defaultModel omitted
    profile = await _external_profile(conn, agent) \
        if agent is not None and agent.kind != AGENT_KIND_BUILTIN else None
    takes = default_agent_takes(agent)
    # Never promise a remote client what the gateway would refuse.
    mcp_http = client_mcp_rules(conn).allows_http
    zeroclaw["maxSessions"] = rt.cfg.acp.max_sessions
    zeroclaw["sessionTimeoutSecs"] = rt.cfg.acp.session_timeout_secs
    persistent = rt.persistent
    caps = conn.dialect.capabilities
    own = own_capabilities(caps, persistent=persistent, remote=conn.remote)
    own_meta: dict[str, Any] = {META_ZEROCLAW: zeroclaw}
    if not persistent:  # said where a client looks, not only in a log nobody reads
        own_meta[META_ACPGATE] = {"store": {"persistent": False, "reason": rt.store_reason}}
    out = InitializeResponse(
        protocol_version=PROTOCOL_VERSION,
        agent_capabilities=agent_capabilities(
            load_session="loadSession" in own, image=takes.prompt_capabilities.image, audio=takes.prompt_capabilities.audio,
            mcp_http=takes.mcp_capabilities.http and mcp_http,
            mcp_sse=takes.mcp_capabilities.sse and mcp_http),
        agent_info=rt.implementation,
        auth_methods=[],
        meta=own_meta,
    ).to_json()
    session = out["agentCapabilities"]["sessionCapabilities"] = own_session_capabilities(own)
    if "attach" in session:  # several clients, one live session: the roles they may take
        session["attach"] = {"roles": list(ATTACH_ROLES)}
    if profile is None:
        return out
    out["agentCapabilities"] = merged_capabilities(
        out["agentCapabilities"], profile.get("agentCapabilities") or {},
        mcp_allowed=mcp_http, own=session_keys(caps))
    methods = profile.get("authMethods")
    out["authMethods"] = methods if isinstance(methods, list) else []
    meta = profile.get("_meta")
    out["_meta"] = {**(meta if isinstance(meta, dict) else {}), **own_meta}
    return out
