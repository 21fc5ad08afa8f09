"""skill_load: the body of one of the agent's skills (``services/agent/skills.py``).

The system prompt lists the skills by name and description; the model loads
one when a task matches it. A read of the agent's own files: not mutating
(every autonomy level has it), auto-approved by default like ``file_read``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from services.agent.skills import SkillError, load_skill
from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolError,
    ToolResult,
    require_str,
)

#: Longest body returned; the rest is read with file_read (the note says where).
MAX_BODY_CHARS = 64_000


class SkillLoadTool(ArgumentsPreview):
    """Returns a skill's instructions, with the directory of the files it mentions."""

    name = "skill_load"
    kind = "read"
    mutating = False
    interactive = False
    description = ("Load one of your skills (listed in the system prompt under Skills) by "
                   "`name`: returns its instructions. Follow them; files they mention lie in "
                   "the skill's directory (read them with file_read).")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name"}},
        "required": ["name"],
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """The skill's body (bounded), or a clear error."""
        name = require_str(args, "name").strip()
        if not ctx.agent_workspace:
            raise ToolError("This agent has no workspace, so no skills.")
        try:
            skill, body = await asyncio.to_thread(load_skill, Path(ctx.agent_workspace),
                                                  ctx.policy, name)
        except SkillError as exc:
            raise ToolError(str(exc)) from None
        body = body.strip()
        if len(body) > MAX_BODY_CHARS:
            more = len(body) - MAX_BODY_CHARS
            body = (f"{body[:MAX_BODY_CHARS]}\n\n[… {more} more characters: read the rest "
                    f"of {skill.path} with file_read]")
        header = (f"Skill `{skill.name}` — {skill.description}\n"
                  f"Its files lie in {skill.directory} (read them with file_read).")
        return ToolResult(output=f"{header}\n\n{body}", title=f"skill {skill.name}")
