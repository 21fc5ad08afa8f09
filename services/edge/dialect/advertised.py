"""What the edge's ``initialize`` advertises for an external default agent.

A client speaking to acpgate should see what the connection's default agent
advertised — its profile, recorded at its last start
(:func:`services.edge.adapter.caps.recorded_profile`) — wherever acpgate can
honour or relay it, plus acpgate's own capabilities. :func:`merged_capabilities`
starts from the agent's ``agentCapabilities`` that acpgate may pass on
(:mod:`services.edge.dialect.passed_caps`: those whose methods and params it
relays as they are; an unknown capability, or one that needs a client opt-in
acpgate does not forward, is withheld) and decides what acpgate must decide:

- ``loadSession`` and the ``sessionCapabilities`` acpgate serves itself from its
  store (``list``, ``delete``, ``resume``, ``close``, ``additionalDirectories``,
  and ``fork``, which creates a session and which acpgate serves for every agent:
  ``ForkSession``, the agent's own fork inside when it has one): acpgate's,
  whatever the agent said (``fork`` only while the method table serves
  ``session/fork``: the generic relay never passes it);
- ``promptCapabilities``: the agent's (``embeddedContext`` always, acpgate
  converts what the agent does not take);
- ``mcpCapabilities``: ``http``/``sse`` as the agent said and the gateway lets the
  client pass; ``acp`` (MCP over ACP) never — its client-side
  ``mcp/*`` messages name no session and are not routed.

The result's ``authMethods`` are the agent's, and its ``_meta`` is the agent's
with acpgate's ``zeroclaw`` key added.
"""

from __future__ import annotations

import copy
from typing import Any

from services.edge.dialect.passed_caps import passed_capabilities

__all__ = ["OWN_SESSION_CAPABILITIES", "merged_capabilities"]

#: ``sessionCapabilities`` acpgate answers from its own store (``fork`` too: it creates a
#: session, which acpgate must know).
OWN_SESSION_CAPABILITIES = frozenset({"list", "delete", "resume", "close",
                                      "additionalDirectories", "fork"})
#: ``mcpCapabilities`` acpgate cannot relay.
UNRELAYED_MCP = frozenset({"acp"})


def _object(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def merged_capabilities(ours: dict[str, Any], agent: dict[str, Any], *,
                        mcp_allowed: bool) -> dict[str, Any]:
    """The ``agentCapabilities`` to advertise: ``agent``'s (raw), decided as the module doc
    says, with ``ours`` (acpgate's own, as JSON) where acpgate decides."""
    out = copy.deepcopy(passed_capabilities(agent))
    out["loadSession"] = ours.get("loadSession", False)
    prompt = _object(out.get("promptCapabilities"))
    prompt["embeddedContext"] = True
    out["promptCapabilities"] = prompt
    mcp = {k: v for k, v in _object(out.get("mcpCapabilities")).items()
           if k not in UNRELAYED_MCP}
    for transport in ("http", "sse"):
        mcp[transport] = bool(mcp.get(transport)) and mcp_allowed
    out["mcpCapabilities"] = mcp
    session = {k: v for k, v in _object(out.get("sessionCapabilities")).items()
               if k not in OWN_SESSION_CAPABILITIES}
    session.update(_object(ours.get("sessionCapabilities")))
    out["sessionCapabilities"] = session
    return out
