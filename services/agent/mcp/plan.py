"""The MCP servers a session starts: the operator's, then the client's under its rules.

Only the edge knows who the client is, and says so in ``_meta.acpgate.clientMcp``
(:func:`client_rules`); behind the edge a request without it gets the strictest
rules, never the client's word. The operator's ``[agents.<alias>] mcp_servers``
are trusted as they are. A client entry of a kind its rules do not allow is
refused with a note (the edge refuses such requests already; this is the
second line). Imports no SDK: the agent loads it only for sessions with servers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from services.agent.approval import ApprovalGate
from services.agent.mcp.confine import MCP_START_TOOL, approval_request
from services.agent.mcp.launch import Approve, Planned
from services.common.client_mcp import (
    MSG_MCP_REFUSED,
)
from services.common.mcp_policy import ClientMcpRules
from services.common.mcp_servers import McpServerSpec, McpStdioServer, parse_servers
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    META_CLIENT_MCP,
)

__all__ = ["approver", "client_rules", "planned_servers"]


def client_rules(acpgate_meta: Mapping[str, Any], *, standalone: bool) -> ClientMcpRules:
    """The rules for the client's servers: ``_meta.acpgate.clientMcp`` when the edge sent it;
    a standalone agent (``acpgate agent``, launched by a local editor) without it serves
    the local user."""
    if standalone and META_CLIENT_MCP not in acpgate_meta:
        return ClientMcpRules()
    return ClientMcpRules.from_meta(acpgate_meta.get(META_CLIENT_MCP))


def planned_servers(operator: Sequence[McpServerSpec], client_servers: Any,
                    rules: ClientMcpRules) -> tuple[list[Planned], list[str]]:
    """The operator's servers, then the client's ``mcpServers`` (refusals apart)."""
    specs, refused = parse_servers(client_servers)
    planned = [Planned(spec) for spec in operator]
    client = rules if rules.remote else None
    for spec in specs:
        why = rules.kind_refusal(spec)
        if why is not None:
            refused.append(MSG_MCP_REFUSED.format(name=spec.name, why=why))
        else:
            planned.append(Planned(spec, client))
    return planned, refused


def approver(gate: ApprovalGate, policy: Callable[[], SecurityPolicy]) -> Approve:
    """Asks through the session's approval gate (its autonomy, auto_approve/always_ask,
    "allow always") whether a gateway client's stdio server may start."""

    async def approve(spec: McpStdioServer) -> str | None:
        summary, arguments = approval_request(spec)
        decision = await gate.decide(policy(), MCP_START_TOOL, True, summary, arguments)
        return None if decision.allowed else decision.reason

    return approve
