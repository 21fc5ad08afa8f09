"""sessions_list: the sessions this one may see (SPEC §14 "list")."""

from __future__ import annotations

from typing import Any, ClassVar

from services.agent.tools.base import ArgumentsPreview, ToolContext, ToolResult, optional_int
from services.agent.tools.sessions_call import call_edge, optional_str, render
from services.common.protocol import M_A2A_LIST

#: Rows returned at most (the edge pages further only on request).
MAX_ROWS = 100


class SessionsListTool(ArgumentsPreview):
    """Lists visible sessions, newest activity first, optionally filtered."""

    name = "sessions_list"
    kind = "read"
    mutating = False
    interactive = False
    description = (
        "List the sessions you may see (your own, those you started, and others as the "
        "configured visibility allows), newest activity first: id, agent, title, state, "
        "parent. `filter` keeps those whose agent, title or id contains it.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "filter": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ROWS, "default": 20},
        },
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask the edge for the visible rows."""
        params = {"filter": optional_str(args, "filter"),
                  "limit": optional_int(args, "limit", 20, 1, MAX_ROWS)}
        return ToolResult(output=render(await call_edge(ctx, M_A2A_LIST, params)))
