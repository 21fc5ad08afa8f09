"""sessions_send: a message to another session, run there as a turn.

Only a session this one may "send" to (SPEC §14, the configured visibility) is
reachable; any other answers "Session not found", exactly like a missing one.
A session that is not running is brought up again with its stored
conversation. By default the tool waits for the reply; ``wait: false`` starts
the turn in the background.
"""

from __future__ import annotations

from typing import Any, ClassVar

from services.agent.tools.base import ArgumentsPreview, ToolContext, ToolResult, require_str
from services.agent.tools.sessions_call import call_edge, optional_bool, render
from services.common.protocol import M_A2A_SEND


class SessionsSendTool(ArgumentsPreview):
    """Runs ``message`` as a turn of session ``sessionId``."""

    name = "sessions_send"
    kind = "other"
    # The other session acts under its own policy: approved like a command, never read-only.
    mutating = True
    interactive = False
    description = (
        "Send `message` to another session (`sessionId`, e.g. one you started with "
        "sessions_spawn); it runs there as a new turn. Returns that session's reply, or "
        "starts the turn in the background when `wait` is false. A busy session refuses.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "sessionId": {"type": "string"},
            "message": {"type": "string"},
            "wait": {"type": "boolean", "default": True},
        },
        "required": ["sessionId", "message"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask the edge to run the turn (and, by default, wait for its reply)."""
        params = {
            "targetSessionId": require_str(args, "sessionId"),
            "message": require_str(args, "message"),
            "wait": optional_bool(args, "wait", True),
        }
        return ToolResult(output=render(await call_edge(ctx, M_A2A_SEND, params)))
