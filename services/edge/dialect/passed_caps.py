"""Which of an external agent's capabilities acpgate may advertise to its clients.

A capability is a promise about what the *host* on the other side of the agent
does: a method the client may call, a param it may send, an update it may
expect. acpgate stands between the two, so it advertises an agent's capability
only where it does what that capability asks of a host:

- it relays the capability's methods or params as they are, with nothing to
  opt into (``auth.logout`` → ``logout`` and ``providers`` → ``providers/*``,
  relayed to the connection's agent; ``sessionCapabilities.systemPrompt``, a
  ``session/new`` param passed on; ``sessionCapabilities.title`` →
  ``session/set_title``, relayed under the session's id, the title coming back in
  ``session_info_update`` as acpgate records it);
- or it decides the capability itself (``loadSession``, the session methods it
  serves from its store, ``promptCapabilities``, ``mcpCapabilities``:
  :mod:`services.edge.dialect.advertised`);
- ``_meta`` objects pass as they are (extensions, no promise of the protocol's;
  their ``_``-methods are relayed).

Everything else is withheld, among it capabilities acpgate knows and cannot
honour — :data:`WITHHELD` says why for each — and every capability it does not
know: what an unknown capability asks of a host (a client opt-in at
``initialize``, sessions acpgate would have to route, an update kind) cannot be
known, and acpgate forwards no client opt-in but ``fs``, ``terminal`` and
``elicitation`` (:func:`services.edge.adapter.caps.client_capabilities`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PASSED", "WITHHELD", "passed_capabilities"]

#: ``agentCapabilities`` keys that may pass, each with the keys of its object that may
#: (None: the value as it is).
PASSED: dict[str, frozenset[str] | None] = {
    "loadSession": None,
    "auth": frozenset({"logout", "_meta"}),
    "providers": None,
    "sessionCapabilities": frozenset({"systemPrompt", "title", "_meta"}),
    "promptCapabilities": frozenset({"image", "audio", "embeddedContext", "_meta"}),
    "mcpCapabilities": frozenset({"http", "sse", "_meta"}),
    "_meta": None,
}

#: Capabilities acpgate knows and withholds (``parent.key``), and why: each needs something
#: of a host that acpgate does not do.
WITHHELD: dict[str, str] = {
    "sessionCapabilities.subagents":
        "a v1 agent's native subagent sessions start only when the client opts in with "
        "clientCapabilities.subagents, which acpgate does not forward; its v1 relay routes "
        "no child session (a v2 agent's children need no capability and are acpgate "
        "sessions: routed, stored, listed)",
    "sessionCapabilities.archive":
        "it promises session/list's archived filter and SessionInfo.archived; acpgate answers "
        "session/list from its own store",
    "sessionCapabilities.status":
        "it promises session/status for the agent's sessions; acpgate relays only to sessions "
        "live on the connection",
    "auth.status": "auth/status is not relayed (only logout, providers/* and _ methods are)",
    "mcpCapabilities.acp": "MCP-over-ACP messages name no session and are not routed",
}


def _object(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def passed_capabilities(agent: dict[str, Any]) -> dict[str, Any]:
    """``agent``'s ``agentCapabilities`` less what :data:`PASSED` leaves out (a copy: the
    values that pass are the agent's own, not copied deeply)."""
    out: dict[str, Any] = {}
    for key, value in agent.items():
        if key not in PASSED:
            continue
        inner = PASSED[key]
        out[key] = value if inner is None else {
            k: v for k, v in _object(value).items() if k in inner}
    return out
