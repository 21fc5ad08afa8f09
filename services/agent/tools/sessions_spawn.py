"""sessions_spawn: start a session of another agent that works for this one.

The new session belongs to this one (its ``spawnedBy`` and ``parentSessionKey``
are this session's key), works in this session's workspace (or a directory
inside it), never has more autonomy than this session, and is closed with it.
By default the tool waits for the child's first turn and returns its reply;
``wait: false`` starts the turn in the background.
"""

from __future__ import annotations

from typing import Any, ClassVar

from services.agent.tools.base import ArgumentsPreview, ToolContext, ToolResult, require_str
from services.agent.tools.sessions_call import call_edge, optional_bool, optional_str, render
from services.common.protocol import M_A2A_SPAWN


class SessionsSpawnTool(ArgumentsPreview):
    """Creates a child session of ``agent`` and runs ``prompt`` as its first turn."""

    name = "sessions_spawn"
    kind = "other"
    # It runs another agent's turn: approved like a command, never offered read-only.
    mutating = True
    interactive = False
    description = (
        "Start a new session of another configured agent (`agent`) and give it `prompt` as "
        "its first message. It works in this session's working directory (or `cwd`, a "
        "directory inside it) with at most this session's autonomy, belongs to this session "
        "and is closed with it. Returns its `sessionId` and, unless `wait` is false, the "
        "reply of that first turn. `label` names it in session lists.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "description": "alias of a configured agent"},
            "prompt": {"type": "string"},
            "cwd": {"type": "string", "description": "inside this session's directory"},
            "label": {"type": "string"},
            "wait": {"type": "boolean", "default": True},
        },
        "required": ["agent", "prompt"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Ask the edge to spawn the session (and, by default, wait for its first turn)."""
        params = {
            "agent": require_str(args, "agent"),
            "prompt": require_str(args, "prompt"),
            "cwd": optional_str(args, "cwd"),
            "label": optional_str(args, "label"),
            "wait": optional_bool(args, "wait", True),
        }
        return ToolResult(output=render(await call_edge(ctx, M_A2A_SPAWN, params)))
