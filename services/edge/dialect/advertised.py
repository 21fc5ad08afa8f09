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

Which capabilities acpgate advertises of its own is read from the method table
(:mod:`services.edge.dialect.methods`): each method acpgate serves names its
:class:`Capability`, and :func:`own_capabilities` picks those a connection may be promised.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from services.common.acp.schema import SessionCapabilities
from services.edge.dialect.passed_caps import passed_capabilities

__all__ = ["Capability", "V2Place", "merged_capabilities", "own_capabilities",
           "own_session_capabilities", "session_keys"]

#: The prefix of a capability under ``agentCapabilities.sessionCapabilities``.
SESSION_CAPS = "sessionCapabilities."


class V2Place(enum.Enum):
    """Where a v2 ``initialize`` result says a capability (``capabilities.session``)."""

    #: Nowhere: v2's baseline promises it (``list``, ``resume``, ``close``), or v2 lacks it.
    BASELINE = "baseline"
    #: ``capabilities.session.<key>: {}``.
    MARKER = "marker"
    #: ``capabilities.session._meta.acpgate.<key>``: v2 has no place of its own for it.
    META = "meta"


@dataclass(frozen=True)
class Capability:
    """One capability acpgate advertises in ``initialize`` for a method it serves.

    ``key`` is its path in v1's ``agentCapabilities`` (``loadSession``, or
    ``sessionCapabilities.<name>``); it is promised only with a persistent store when
    ``needs_store``, only to a gateway (remote) client when ``remote_only``.
    """

    key: str
    needs_store: bool = True
    remote_only: bool = False
    v2: V2Place = V2Place.BASELINE

    @property
    def session_key(self) -> str | None:
        """Its name under ``sessionCapabilities``, or None for a top-level one."""
        return self.key[len(SESSION_CAPS):] if self.key.startswith(SESSION_CAPS) else None


def own_capabilities(capabilities: Iterable[Capability], *, persistent: bool,
                     remote: bool) -> frozenset[str]:
    """The keys of ``capabilities`` a connection is promised: with or without a persistent
    store, to a remote (gateway) client or the local one."""
    return frozenset(c.key for c in capabilities
                     if (persistent or not c.needs_store) and (remote or not c.remote_only))

#: ``mcpCapabilities`` acpgate cannot relay.
UNRELAYED_MCP = frozenset({"acp"})


def _object(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def own_session_capabilities(own: frozenset[str]) -> dict[str, Any]:
    """The ``sessionCapabilities`` object promising the ``own`` keys (of
    :func:`own_capabilities`): ACP's in the schema's order, each as its typed model writes
    it, then acpgate's own (``attach``) as ``{}``, by name."""
    keys = {k[len(SESSION_CAPS):] for k in own if k.startswith(SESSION_CAPS)}
    typed = SessionCapabilities.from_json({k: {} for k in keys}).to_json()
    return {**typed, **{k: {} for k in sorted(keys - typed.keys())}}


def session_keys(capabilities: Iterable[Capability],
                 v2: V2Place | None = None) -> frozenset[str]:
    """The ``sessionCapabilities`` names among ``capabilities`` (only those v2 says at
    ``v2``, when given)."""
    return frozenset(c.session_key for c in capabilities
                     if c.session_key and (v2 is None or c.v2 is v2))


def merged_capabilities(ours: dict[str, Any], agent: dict[str, Any], *, mcp_allowed: bool,
                        own: frozenset[str]) -> dict[str, Any]:
    """The ``agentCapabilities`` to advertise: ``agent``'s (raw), decided as the module doc
    says, with ``ours`` (acpgate's own, as JSON) where acpgate decides; ``own`` names the
    ``sessionCapabilities`` acpgate decides (those of the methods it serves), whether it
    promises them or not."""
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
               if k not in own}
    session.update(_object(ours.get("sessionCapabilities")))
    out["sessionCapabilities"] = session
    return out
