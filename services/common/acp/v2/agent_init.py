"""``initialize`` toward an agent that may speak v2 (pure).

acpgate's internals build a v1 ``initialize`` for every adapter. :func:`offer` turns it
into what the agent's ``protocol`` setting asks for:

- ``1``: the v1 request as it is;
- ``2``: a v2 request (``info``, ``capabilities``: what v2 keeps of the client's — its
  elicitation support and ``_meta``; v2 has no ``fs``/``terminal``);
- ``auto`` (:data:`~.names.PROTOCOL_AUTO`): both at once — ``protocolVersion: 2`` with the
  v2 fields beside the v1 ones, so a v1 agent (which answers its own version, 1) reads
  the v1 fields it knows, and a v2 agent the v2 ones. An agent that refuses it (-32022,
  or any error) is asked again with the v1 request (:func:`fallback`).

:func:`read_answer` reads the answer: a v2 one is given to acpgate as the v1 result it
stands for (:func:`v1_initialize_result`), the agent's own v2 answer kept under
:data:`V2_KEY` for its recorded profile.
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.names import PROTOCOL_AUTO, PROTOCOL_V1, PROTOCOL_V2

__all__ = [
    "V2_KEY",
    "AgentSpeaksV1",
    "fallback",
    "offer",
    "read_answer",
    "v1_auth_methods",
    "v1_initialize_result",
]

#: Where the v1 reading of a v2 answer keeps the agent's own (``capabilities``,
#: ``authMethods``, ``info``): its profile records it beside the v1 reading.
V2_KEY = "v2"
_V1_ONLY = ("clientCapabilities", "clientInfo")
#: v2 session capabilities with no v1 ``sessionCapabilities`` twin (v1 has them elsewhere).
_SESSION_V2_ONLY = frozenset({"prompt", "mcp"})
#: v2 auth method type that v1 leaves unsaid (v1's default: the agent handles it).
_AGENT_AUTH = "agent"


class AgentSpeaksV1(ValueError):
    """An agent configured with ``protocol = 2`` answered ``initialize`` with v1."""


def _v2_capabilities(v1_caps: Any) -> dict[str, Any]:
    caps = v1_caps if isinstance(v1_caps, dict) else {}
    out: dict[str, Any] = {}
    elicitation = caps.get("elicitation")
    if isinstance(elicitation, dict):
        out["elicitation"] = elicitation
    elif elicitation is True:
        out["elicitation"] = {"form": {}}
    if isinstance(caps.get("_meta"), dict):
        out["_meta"] = caps["_meta"]
    return out


def offer(v1_params: dict[str, Any], protocol: int) -> dict[str, Any]:
    """The ``initialize`` params for an agent whose ``protocol`` is ``protocol`` (module
    doc)."""
    if protocol == PROTOCOL_V1:
        return v1_params
    info = v1_params.get("clientInfo")
    v2: dict[str, Any] = {
        "protocolVersion": PROTOCOL_V2,
        "info": info if isinstance(info, dict) else {"name": "acpgate", "version": "0"},
        "capabilities": _v2_capabilities(v1_params.get("clientCapabilities")),
    }
    if isinstance(v1_params.get("_meta"), dict):
        v2["_meta"] = v1_params["_meta"]
    if protocol == PROTOCOL_AUTO:
        return {**{k: v for k, v in v1_params.items() if k in _V1_ONLY}, **v2}
    return v2


def fallback(protocol: int) -> bool:
    """Whether a refused offer is asked again with v1 (only ``auto`` does)."""
    return protocol == PROTOCOL_AUTO


def _markers(found: Any, names: tuple[str, ...]) -> dict[str, bool]:
    given = found if isinstance(found, dict) else {}
    return {name: given.get(name) is not None for name in names}


def v1_auth_methods(methods: Any) -> list[dict[str, Any]]:
    """v2 ``authMethods`` (``methodId``, ``type``) as v1's (``id``; ``type`` left out where
    it is v1's default, ``agent``)."""
    out: list[dict[str, Any]] = []
    for method in methods if isinstance(methods, list) else ():
        if not isinstance(method, dict) or not isinstance(method.get("methodId"), str):
            continue
        item = {k: v for k, v in method.items() if k not in ("methodId", "type")}
        item["id"] = method["methodId"]
        item.setdefault("name", method["methodId"])
        if isinstance(method.get("type"), str) and method["type"] != _AGENT_AUTH:
            item["type"] = method["type"]
        out.append(item)
    return out


def v1_initialize_result(v2: dict[str, Any]) -> dict[str, Any]:
    """A v2 ``initialize`` answer as the v1 result acpgate reads (module doc).

    v2's baseline session methods (list, resume, close) are v1 session capabilities;
    ``loadSession`` is on, as acpgate restores with ``session/resume`` and
    ``replayFrom: start`` (v2 has no ``session/load``). Every other session capability
    (``delete``, ``additionalDirectories``, ``fork``, ``systemPrompt``, ``title``…) has
    v1's name and shape and is kept as it came, as are ``providers`` and ``auth``'s
    extensions; v2's ``auth/logout``, promised by a non-empty ``authMethods``, is v1's
    ``auth.logout``.
    """
    caps = v2.get("capabilities")
    caps = caps if isinstance(caps, dict) else {}
    session = caps.get("session")
    agent_caps: dict[str, Any] = {"loadSession": isinstance(session, dict)}
    if isinstance(session, dict):
        agent_caps["promptCapabilities"] = _markers(session.get("prompt"),
                                                    ("image", "audio", "embeddedContext"))
        agent_caps["mcpCapabilities"] = {"http": _markers(session.get("mcp"), ("http",))["http"],
                                         "sse": False}
        sessions: dict[str, Any] = {"list": {}, "resume": {}, "close": {}}
        for name, value in session.items():
            if name not in _SESSION_V2_ONLY and isinstance(value, dict):
                sessions[name] = value
        agent_caps["sessionCapabilities"] = sessions
    if isinstance(caps.get("providers"), dict):
        agent_caps["providers"] = caps["providers"]
    auth = dict(caps["auth"]) if isinstance(caps.get("auth"), dict) else {}
    methods = v1_auth_methods(v2.get("authMethods"))
    if methods:
        auth["logout"] = {}
    if auth:
        agent_caps["auth"] = auth
    if isinstance(caps.get("_meta"), dict):
        agent_caps["_meta"] = caps["_meta"]
    out: dict[str, Any] = {
        "protocolVersion": PROTOCOL_V2,
        "agentCapabilities": agent_caps,
        "authMethods": methods,
    }
    if isinstance(v2.get("info"), dict):
        out["agentInfo"] = v2["info"]
    if isinstance(v2.get("_meta"), dict):
        out["_meta"] = v2["_meta"]
    out[V2_KEY] = {k: v2[k] for k in ("capabilities", "authMethods", "info") if k in v2}
    return out


def read_answer(result: Any, protocol: int) -> tuple[int, Any]:
    """The version the agent answered and the result acpgate reads (a v2 answer as v1's).
    :class:`AgentSpeaksV1` when ``protocol`` is 2 and the agent answered otherwise."""
    version = result.get("protocolVersion") if isinstance(result, dict) else None
    if version == PROTOCOL_V2 and isinstance(result, dict):
        return PROTOCOL_V2, v1_initialize_result(result)
    if protocol == PROTOCOL_V2:
        raise AgentSpeaksV1(f"the agent answered initialize with protocolVersion {version!r}; "
                            "it is configured with protocol = 2")
    return PROTOCOL_V1, result
