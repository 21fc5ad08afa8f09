"""file_read: a text file (optionally a line range), inside the policy's roots."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolResult,
    optional_int,
    require_str,
)
from services.agent.tools.fs import read_text, resolve_read

#: Characters of file content returned to the model at most.
MAX_OUTPUT_CHARS = 100_000


class FileReadTool(ArgumentsPreview):
    """Reads a UTF-8 file; ``offset``/``limit`` select lines (1-based)."""

    name = "file_read"
    kind = "read"
    mutating = False
    interactive = False
    description = ("Read a text file. Relative paths are relative to the working directory. "
                   "Optional `offset` (first line, 1-based) and `limit` (number of lines).")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file path"},
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Return the file's text (or the selected lines)."""
        path = await resolve_read(ctx.policy, require_str(args, "path"))
        text = await asyncio.to_thread(read_text, path)
        if "offset" in args or "limit" in args:
            lines = text.splitlines(keepends=True)
            start = optional_int(args, "offset", 1, 1, max(1, len(lines))) - 1
            count = optional_int(args, "limit", len(lines), 1, max(1, len(lines)))
            text = "".join(lines[start : start + count])
        if len(text) > MAX_OUTPUT_CHARS:
            text = text[:MAX_OUTPUT_CHARS] + f"\n… (truncated at {MAX_OUTPUT_CHARS} characters)"
        return ToolResult(output=text)
