"""sessions_history: the stored conversation of a session this one may see."""

from __future__ import annotations

from typing import Any, ClassVar

from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolResult,
    optional_int,
    require_str,
)
from services.agent.tools.sessions_call import call_edge, render
from services.common.protocol import M_A2A_HISTORY

#: Items returned at most.
MAX_ITEMS = 200


class SessionsHistoryTool(ArgumentsPreview):
    """Reads the newest ``limit`` stored items of session ``sessionId``."""

    name = "sessions_history"
    kind = "read"
    mutating = False
    interactive = False
    description = (
        "Read the stored conversation of a session you may see (`sessionId`): its newest "
        "`limit` items (user and assistant messages, tool calls and results), oldest first. "
        "Only completed turns are stored.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "sessionId": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS, "default": 20},
        },
        "required": ["sessionId"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask the edge for the history."""
        params = {"targetSessionId": require_str(args, "sessionId"),
                  "limit": optional_int(args, "limit", 20, 1, MAX_ITEMS)}
        return ToolResult(output=render(await call_edge(ctx, M_A2A_HISTORY, params)))
