"""glob and content_search: finding files and text, never outside the policy's roots."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any, ClassVar

from services.agent.enforce import may_read
from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolError,
    ToolResult,
    optional_int,
)
from services.agent.tools.fs import MAX_TEXT_BYTES, resolve_read
from services.common.policy import SecurityPolicy

_SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache"})


def _display(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _glob(policy: SecurityPolicy, base: Path, pattern: str, limit: int) -> list[str]:
    """Matches of ``pattern`` under ``base`` that the policy lets be read."""
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        raise ToolError("`pattern` must be relative to `path` and must not contain '..'")
    out: list[str] = []
    for match in sorted(base.glob(pattern)):
        if not may_read(policy, str(match)):
            continue  # e.g. a symlink pointing outside the roots
        out.append(_display(match, base) + ("/" if match.is_dir() else ""))
        if len(out) >= limit:
            break
    return out


class GlobTool(ArgumentsPreview):
    """Lists files matching a glob pattern (``*`` lists a directory)."""

    name = "glob"
    kind = "search"
    mutating = False
    interactive = False
    description = ("List files matching a glob `pattern` (e.g. `**/*.py`; `*` lists a "
                   "directory) under `path` (default: the working directory).")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string"},
            "path": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1},
        },
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Return matching paths, one per line."""
        base = await resolve_read(ctx.policy, str(args.get("path") or ctx.policy.workspace_dir))
        if not await asyncio.to_thread(base.is_dir):
            raise ToolError(f"not a directory: {base}")
        pattern = str(args.get("pattern") or "*")
        limit = optional_int(args, "limit", 500, 1, 5000)
        found = await asyncio.to_thread(_glob, ctx.policy, base, pattern, limit)
        if not found:
            return ToolResult(output="(no matches)")
        more = f"\n… (stopped at {limit} matches)" if len(found) >= limit else ""
        return ToolResult(output="\n".join(found) + more)


def _search(policy: SecurityPolicy, base: Path, regex: re.Pattern[str], file_glob: str,
            limit: int) -> list[str]:
    """``relpath:line: text`` for each matching line of each readable text file."""
    out: list[str] = []
    files = [base] if base.is_file() else None
    if files is None:
        files = []
        for root, dirs, names in os.walk(base):  # does not follow symlinked dirs
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            files.extend(Path(root) / n for n in sorted(names))
    for path in files:
        if file_glob and not path.match(file_glob):
            continue
        if not may_read(policy, str(path)):
            continue
        try:
            if path.stat().st_size > MAX_TEXT_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                out.append(f"{_display(path, base)}:{number}: {line[:300]}")
                if len(out) >= limit:
                    return out
    return out


class ContentSearchTool(ArgumentsPreview):
    """Searches file contents with a regular expression."""

    name = "content_search"
    kind = "search"
    mutating = False
    interactive = False
    description = ("Search text files for a regular expression `pattern` under `path` "
                   "(default: the working directory); optional `glob` filters file names.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string"},
            "path": {"type": "string"},
            "glob": {"type": "string"},
            "ignore_case": {"type": "boolean"},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["pattern"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Return matching lines."""
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ToolError("missing required string argument `pattern`")
        try:
            regex = re.compile(pattern, re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from None
        base = await resolve_read(ctx.policy, str(args.get("path") or ctx.policy.workspace_dir))
        limit = optional_int(args, "limit", 200, 1, 2000)
        found = await asyncio.to_thread(_search, ctx.policy, base, regex,
                                        str(args.get("glob") or ""), limit)
        if not found:
            return ToolResult(output="(no matches)")
        more = f"\n… (stopped at {limit} matches)" if len(found) >= limit else ""
        return ToolResult(output="\n".join(found) + more)
