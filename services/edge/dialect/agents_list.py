"""``_acpgate/agents/list``: the agents a client may start a session of.

A client of ``/acp`` (the web console's agent picker, an editor's) learns which
aliases ``session/new``'s ``agentAlias`` may name without a private API. The
session service decides (``ListAgents``: every dispatchable alias, since the
alias chain has no per-principal rule; a disabled or incomplete one is never
listed) and says only what a client may know of each: its alias, kind, the
operator's one-line ``description`` and, for the built-in agent, its model —
never a command, an environment, a key or a path. ``default`` marks the alias
a ``session/new`` without one gets on this connection (``?agent=`` counts).
"""

from __future__ import annotations

from typing import Any

from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import AgentSummary
from services.edge.dialect.dispatch import DialectConnection
from services.edge.errors import service_error

__all__ = ["agents_list"]


def agent_view(agent: AgentSummary, default_alias: str) -> dict[str, Any]:
    """One listed agent as the client gets it (empty fields left out)."""
    view: dict[str, Any] = {"alias": agent.alias, "kind": agent.kind,
                            "default": agent.alias == default_alias}
    if agent.description:
        view["description"] = agent.description
    if agent.default_model:
        view["model"] = agent.default_model
    return view


async def agents_list(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """``{agents: [{alias, kind, default, description?, model?}], defaultAgent?}``."""
    try:
        resp = await conn.runtime.session_service.list_agents(conn.default_agent)
    except ServiceError as exc:
        raise service_error(exc) from None
    out: dict[str, Any] = {"agents": [agent_view(a, resp.default_alias) for a in resp.agents]}
    if resp.default_alias:
        out["defaultAgent"] = resp.default_alias
    return out
