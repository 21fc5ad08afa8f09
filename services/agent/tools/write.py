"""file_write and file_edit: changes shown as ACP diff content (SPEC §5)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, ClassVar

from services.agent.enforce import PolicyViolation
from services.agent.tools.base import ToolContext, ToolError, ToolResult, require_str
from services.agent.tools.fs import read_text_or_none, resolve_write, write_text_atomic


def diff_fields(path: str, old: str | None, new: str) -> dict[str, Any]:
    """The ``rawInput`` + diff ``content`` of a file change (SPEC §5)."""
    return {
        "rawInput": {"path": path, "oldText": old, "newText": new},
        "content": [{"type": "diff", "path": path, "oldText": old, "newText": new}],
    }


def apply_edit(text: str, old: str, new: str, replace_all: bool) -> str:
    """Replace ``old`` by ``new``; exactly one match unless ``replace_all``."""
    if not old:
        raise ToolError("`old_string` must not be empty")
    count = text.count(old)
    if count == 0:
        raise ToolError("`old_string` was not found in the file")
    if count > 1 and not replace_all:
        raise ToolError(f"`old_string` occurs {count} times; make it unique or set replace_all")
    return text.replace(old, new) if replace_all else text.replace(old, new, 1)


async def _diff_preview(
    plan: Awaitable[tuple[str, str | None, str]], args: dict[str, Any]
) -> dict[str, Any]:
    """The diff a planned change would make; the plain arguments when it cannot be planned.

    A preview only decorates the permission request, so a refused path or a
    non-matching edit must not fail it: ``run`` reports that error instead.
    """
    try:
        path, old, new = await plan
    except (ToolError, PolicyViolation, OSError):
        return {"rawInput": args}
    return diff_fields(path, old, new)


class FileWriteTool:
    """Creates or overwrites a text file."""

    name = "file_write"
    kind = "edit"
    mutating = True
    interactive = False
    description = ("Create or overwrite a text file with `content`. Relative paths are relative "
                   "to the working directory; parent directories are created.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }

    async def _plan(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str | None, str]:
        path = await resolve_write(ctx.policy, require_str(args, "path"))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("missing required string argument `content`")
        old = await asyncio.to_thread(read_text_or_none, path)
        return str(path), old, content

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The diff of the write; plain arguments when the path is refused."""
        return await _diff_preview(self._plan(args, ctx), args)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Write the file."""
        path, old, new = await self._plan(args, ctx)
        await asyncio.to_thread(write_text_atomic, Path(path), new)
        verb = "Created" if old is None else "Wrote"
        return ToolResult(output=f"{verb} {path} ({len(new.encode())} bytes)")


class FileEditTool:
    """Replaces one exact string in a text file."""

    name = "file_edit"
    kind = "edit"
    mutating = True
    interactive = False
    description = ("Edit a text file: replace `old_string` (must occur exactly once unless "
                   "`replace_all`) with `new_string`.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean"},
        },
        "required": ["path", "old_string", "new_string"],
    }

    async def _plan(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str, str]:
        path = await resolve_write(ctx.policy, require_str(args, "path"))
        old_s = args.get("old_string")
        new_s = args.get("new_string")
        if not isinstance(old_s, str) or not isinstance(new_s, str):
            raise ToolError("`old_string` and `new_string` must be strings")
        old = await asyncio.to_thread(read_text_or_none, path)
        if old is None:
            raise ToolError(f"file not found: {path}")
        return str(path), old, apply_edit(old, old_s, new_s, bool(args.get("replace_all")))

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The diff of the edit; plain arguments when it cannot apply."""
        return await _diff_preview(self._plan(args, ctx), args)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Apply the edit (re-reading the file, so a change since preview is respected)."""
        path, _old, new = await self._plan(args, ctx)
        await asyncio.to_thread(write_text_atomic, Path(path), new)
        return ToolResult(output=f"Edited {path}")
