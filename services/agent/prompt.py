"""The system prompt: identity and skills from the agent workspace, the session workspace as cwd.

From the agent workspace (the seed: ACP sessions inherit the agent's
personality and skills): IDENTITY.md and SOUL.md, whole (bounded), and the
list of skills (``skills/<name>/SKILL.md``: name and description, bounded;
``skill_load`` returns a body). MEMORY.md stays unused: ACP sessions have no
memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.agent.skills import Shelf, find_skills
from services.common.policy import SecurityPolicy

#: Characters read from each of IDENTITY.md / SOUL.md at most.
MAX_PERSONA_CHARS = 32_000
PERSONA_FILES = ("IDENTITY.md", "SOUL.md")
#: Characters of the skills list at most (names and descriptions; the rest is counted).
MAX_SKILL_LIST_CHARS = 12_000


def _read_persona(agent_workspace: Path, name: str) -> str:
    path = agent_workspace / name
    try:
        if not path.is_file():
            return ""
        return path.read_text(encoding="utf-8", errors="replace")[:MAX_PERSONA_CHARS].strip()
    except OSError:
        return ""


def skills_section(shelf: Shelf) -> str:
    """The prompt's Skills section ("" when the workspace has no usable skill)."""
    if not shelf.skills:
        return ""
    lines: list[str] = []
    size = 0
    for skill in shelf.skills:
        line = f"- `{skill.name}`: {skill.description}"
        if size + len(line) > MAX_SKILL_LIST_CHARS:
            break
        lines.append(line)
        size += len(line) + 1
    left_out = len(shelf.skills) - len(lines) + shelf.left_out
    if left_out:
        lines.append(f"- … and {left_out} more in {shelf.root} (not listed here)")
    return ("## Skills\n\nSkills are instructions for particular kinds of tasks, kept in "
            f"{shelf.root}. When a task matches a skill's description, load it with "
            "`skill_load` first and follow it; files it mentions lie in its directory.\n"
            + "\n".join(lines))


def build_system_prompt(alias: str, agent_workspace: Path, policy: SecurityPolicy,
                        mcp_notes: Sequence[str] = (), agents: Sequence[str] = ()) -> str:
    """Compose the system prompt (reads files: call it off the event loop).

    ``mcp_notes`` are the session's MCP problems (servers refused or unavailable),
    so the model can tell the user instead of guessing why a tool is missing.
    ``agents`` are the configured agents ``sessions_spawn`` can start (given only
    when the session tools are offered).
    """
    parts = [
        f"You are `{alias}`, a coding agent reached through the Agent Client Protocol (ACP). "
        "You help the user by reading and changing files and running commands with your tools.",
    ]
    for name in PERSONA_FILES:
        text = _read_persona(agent_workspace, name)
        if text:
            parts.append(f"## {name}\n\n{text}")
    mode = {
        "readonly": "You may read and search files but not write them or run commands.",
        "supervised": "Tool calls that change things may need the user's approval; a denied "
                      "call is reported to you as a sentence saying who denied it.",
        "full": "Your tool calls run without asking for approval.",
    }.get(policy.autonomy, "")
    parts.append(
        "## Environment\n\n"
        f"Working directory: {policy.workspace_dir}\n"
        "Relative paths in file tools and the shell are resolved against this directory; "
        "stay inside it. " + mode + "\n"
        "Use `ask_user` only with a list of choices. Use `escalate_to_human` to hand a "
        "decision you should not make alone to the user, and go on only if they approve. "
        "Use `todo` to share a plan for longer tasks. Use `deliver_file` to hand a finished "
        "file to the user."
    )
    skills = skills_section(find_skills(agent_workspace, policy))
    if skills:
        parts.append(skills)
    if agents:
        parts.append("## Other sessions\n\nWith `sessions_spawn` you can start a session of "
                     "one of these agents to work for you: " + ", ".join(agents) + ". Sessions "
                     "you start belong to this one; `sessions_list`, `sessions_history`, "
                     "`sessions_send` and `session_status` reach them and the other sessions "
                     "you may see.")
    if mcp_notes:
        parts.append("## MCP servers\n\nTools named `<server>__<tool>` come from MCP servers "
                     "configured for this session. Not available now:\n"
                     + "\n".join(f"- {note}" for note in mcp_notes))
    return "\n\n".join(parts)
