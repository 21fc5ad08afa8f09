"""session_status: how a session this one may see is doing (SPEC §14 "status")."""

from __future__ import annotations

from typing import Any, ClassVar

from services.agent.tools.base import ArgumentsPreview, ToolContext, ToolResult, require_str
from services.agent.tools.sessions_call import call_edge, render
from services.common.protocol import M_A2A_STATUS


class SessionStatusTool(ArgumentsPreview):
    """Reports state, busy, last activity, agent, owner and lease state of ``sessionId``."""

    name = "session_status"
    kind = "read"
    mutating = False
    interactive = False
    description = (
        "The status of a session you may see (`sessionId`): state (active = running a turn, "
        "idle = running without a turn, closed = not running), busy, last activity, agent, "
        "owner, parent, message count and the state of its process lease.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"sessionId": {"type": "string"}},
        "required": ["sessionId"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask the edge for the status."""
        params = {"targetSessionId": require_str(args, "sessionId")}
        return ToolResult(output=render(await call_edge(ctx, M_A2A_STATUS, params)))
