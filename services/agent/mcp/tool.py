"""One tool of an MCP server, as a tool of the agent (``<server>__<tool>``).

It goes through the same turn loop as the built-in tools: announced by a
``tool_call`` update, approved by the gate (``supervised`` asks unless
``auto_approve`` matches the name; ``readonly`` allows it only when the server
marks it read-only, ``annotations.readOnlyHint``), run, and reported by a
``tool_call_update``.
"""

from __future__ import annotations

from typing import Any

import mcp_types

from services.agent.mcp.connection import McpConnection
from services.agent.mcp.launch import McpCallFailed, McpUnavailable
from services.agent.mcp.results import tool_result
from services.agent.tools.base import ArgumentsPreview, ToolContext, ToolError, ToolResult

__all__ = ["McpTool", "input_schema"]


def input_schema(tool: mcp_types.Tool) -> dict[str, Any]:
    """The tool's JSON schema as parameters; object schemas only (what model APIs accept)."""
    schema = tool.input_schema
    if isinstance(schema, dict) and schema.get("type") == "object":
        return schema
    return {"type": "object", "properties": {}}


def _description(server: str, tool: mcp_types.Tool) -> str:
    text = (tool.description or tool.title or
            (tool.annotations.title if tool.annotations else None) or tool.name)
    return f"{text.strip()}\n\n(Tool `{tool.name}` of the MCP server `{server}`.)"


class McpTool(ArgumentsPreview):
    """Calls ``remote`` on ``connection``; the result becomes text and ACP content."""

    interactive = False

    def __init__(self, name: str, connection: McpConnection, remote: mcp_types.Tool) -> None:
        self.name = name
        self.connection = connection
        self.remote_name = remote.name
        self.description = _description(connection.name, remote)
        self.parameters = input_schema(remote)
        read_only = bool(remote.annotations and remote.annotations.read_only_hint)
        #: Only a server's explicit read-only hint lets a tool run in readonly autonomy.
        self.mutating = not read_only
        self.kind = "read" if read_only else "other"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the server (starting it again if it was lost) and map its result."""
        try:
            result = await self.connection.call(self.remote_name, args)
        except (McpUnavailable, McpCallFailed) as exc:
            raise ToolError(str(exc)) from None
        return await tool_result(result, ctx.policy.workspace_dir)
