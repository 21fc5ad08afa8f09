"""Version negotiation and the v2 ``initialize`` shapes (pure).

A client names the newest version it speaks; acpgate answers the highest version it
serves that is not above it (v2's rule, which v1's "answer your own" agrees with for
every v1 client). None fits (a request below 1): -32022 with ``{requested, supported}``.
A ``protocolVersion`` that is not an integer reads as 1, as acpgate always read it.

:func:`v2_initialize_result` reshapes the v1 answer acpgate builds (capabilities of the
connection's default agent and of acpgate's store) into v2's: ``info`` and
``capabilities`` with ``session{…}`` object markers, ``authMethods`` with ``methodId`` and
a ``type``. Which of acpgate's ``sessionCapabilities`` v2 marks, and which it has no place
for (those go under ``_meta.acpgate``), the caller names (the edge reads its method table);
what the agent advertises and v1 clients get as it is (``providers``, ``auth._meta``,
``sessionCapabilities.systemPrompt``/``title``) has the same name in v2 and passes.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from services.common.acp.v2.names import SUPPORTED_VERSIONS
from services.common.protocol import META_ACPGATE

__all__ = ["NoVersionFits", "negotiate", "v2_auth_methods", "v2_client_info",
           "v2_initialize_result"]

#: ``sessionCapabilities`` an agent advertises that v2 names alike (same key, same shape).
_AGENT_SESSION_KEYS = frozenset({"systemPrompt", "title"})
#: A v1 auth method's ``type`` when it names none (v1's default: the agent handles it).
_DEFAULT_AUTH_TYPE = "agent"


class NoVersionFits(ValueError):
    """No version acpgate serves is at or below the one requested."""

    def __init__(self, requested: int) -> None:
        super().__init__(f"no protocol version <= {requested}")
        self.requested = requested

    @property
    def data(self) -> dict[str, Any]:
        """The error's ``data`` (v2 ``UnsupportedProtocolVersionErrorData``)."""
        return {"requested": self.requested, "supported": list(SUPPORTED_VERSIONS)}


def negotiate(requested: Any) -> int:
    """The version to speak with a client that asked for ``requested`` (module doc)."""
    if isinstance(requested, bool) or not isinstance(requested, int):
        return SUPPORTED_VERSIONS[0]
    fitting = [v for v in SUPPORTED_VERSIONS if v <= requested]
    if not fitting:
        raise NoVersionFits(requested)
    return max(fitting)


def v2_client_info(params: dict[str, Any]) -> dict[str, Any] | None:
    """A v2 client's ``info`` (its v1 ``clientInfo``), if it is an object."""
    info = params.get("info")
    return info if isinstance(info, dict) else None


def _markers(pairs: dict[str, Any]) -> dict[str, Any]:
    return {k: {} for k, on in pairs.items() if on}


def v2_auth_methods(methods: Any) -> list[dict[str, Any]]:
    """v1 ``authMethods`` (``id``, optional ``type``) as v2's (``methodId``, ``type``)."""
    out: list[dict[str, Any]] = []
    for method in methods if isinstance(methods, list) else ():
        if not isinstance(method, dict):
            continue
        method_id = method.get("methodId", method.get("id"))
        if not isinstance(method_id, str) or not method_id:
            continue
        item = {k: v for k, v in method.items() if k not in ("id", "methodId", "type")}
        kind = method.get("type")
        item["methodId"] = method_id
        item["type"] = kind if isinstance(kind, str) and kind else _DEFAULT_AUTH_TYPE
        item.setdefault("name", method_id)
        out.append(item)
    return out


def v2_initialize_result(v1: dict[str, Any], *, version: int, markers: Set[str],
                         under_meta: Set[str]) -> dict[str, Any]:
    """The v2 ``initialize`` result for the v1 one acpgate built (module doc): the v1
    ``sessionCapabilities`` named in ``markers`` as ``capabilities.session.<key>: {}``,
    those in ``under_meta`` under ``capabilities.session._meta.acpgate``, the rest dropped (v2's
    baseline)."""
    caps = v1.get("agentCapabilities")
    caps = caps if isinstance(caps, dict) else {}
    prompt = caps.get("promptCapabilities")
    prompt = prompt if isinstance(prompt, dict) else {}
    mcp = caps.get("mcpCapabilities")
    mcp = mcp if isinstance(mcp, dict) else {}
    sessions = caps.get("sessionCapabilities")
    sessions = sessions if isinstance(sessions, dict) else {}
    session: dict[str, Any] = {
        # acpgate materialises embedded resources for any agent (SPEC §4).
        "prompt": {**_markers({"image": prompt.get("image"), "audio": prompt.get("audio")}),
                   "embeddedContext": {}},
        # stdio MCP servers are v1's baseline; HTTP as the v1 answer says.
        "mcp": {"stdio": {}, **_markers({"http": mcp.get("http")})},
        **{k: {} for k in sessions if k in markers},
        # An agent's own, passed to v1 clients as they are: the same in v2.
        **{k: v for k, v in sessions.items() if k in _AGENT_SESSION_KEYS and isinstance(v, dict)},
    }
    extras = {k: v for k, v in sessions.items() if k in under_meta}
    if extras:
        session["_meta"] = {META_ACPGATE: extras}
    info = v1.get("agentInfo")
    out: dict[str, Any] = {
        "protocolVersion": version,
        "info": info if isinstance(info, dict) else {"name": "acpgate", "version": "0"},
        "capabilities": {"session": session},
    }
    if isinstance(caps.get("providers"), dict):
        out["capabilities"]["providers"] = caps["providers"]
    methods = v2_auth_methods(v1.get("authMethods"))
    auth = caps.get("auth")
    auth_meta = auth.get("_meta") if isinstance(auth, dict) else None
    if methods or isinstance(auth_meta, dict):
        out["capabilities"]["auth"] = {"_meta": auth_meta} if isinstance(auth_meta, dict) else {}
    out["authMethods"] = methods
    meta = v1.get("_meta")
    if isinstance(meta, dict) and meta:
        out["_meta"] = meta
    return out
