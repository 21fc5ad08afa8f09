"""todo: the agent's plan, sent whole as an ACP ``plan`` update."""

from __future__ import annotations

from typing import Any, ClassVar

from services.agent.tools.base import ArgumentsPreview, ToolContext, ToolError, ToolResult
from services.common.protocol import U_PLAN

PRIORITIES = ("high", "medium", "low")
STATUSES = ("pending", "in_progress", "completed")


def normalize_entries(raw: Any) -> list[dict[str, str]]:
    """Validate plan entries: ``content`` required; priority/status defaulted when absent."""
    if not isinstance(raw, list) or not raw:
        raise ToolError("`entries` must be a non-empty list of {content, priority, status}")
    out: list[dict[str, str]] = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            item = {"content": item}
        if not isinstance(item, dict) or not str(item.get("content") or "").strip():
            raise ToolError(f"entry {i} needs a non-empty `content`")
        priority = str(item.get("priority") or "medium")
        status = str(item.get("status") or "pending")
        if priority not in PRIORITIES:
            raise ToolError(f"entry {i}: priority must be one of {', '.join(PRIORITIES)}")
        if status not in STATUSES:
            raise ToolError(f"entry {i}: status must be one of {', '.join(STATUSES)}")
        out.append({"content": str(item["content"]), "priority": priority, "status": status})
    return out


class TodoTool(ArgumentsPreview):
    """Replaces the session's plan and shows it to the client."""

    name = "todo"
    kind = "other"
    mutating = False
    interactive = False
    description = ("Set your plan for this task: `entries` is the whole list, each "
                   "{content, priority: high|medium|low, status: pending|in_progress|completed}.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "priority": {"type": "string", "enum": list(PRIORITIES)},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["content"],
                },
            }
        },
        "required": ["entries"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Emit the ``plan`` update (the edge stores the session's latest plan)."""
        entries = normalize_entries(args.get("entries"))
        await ctx.send_update({"sessionUpdate": U_PLAN, "entries": entries})
        done = sum(1 for e in entries if e["status"] == "completed")
        return ToolResult(output=f"Plan updated: {len(entries)} entries, {done} completed.")
