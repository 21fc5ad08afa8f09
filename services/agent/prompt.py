"""The system prompt: identity from the agent workspace, the session workspace as cwd."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.policy import SecurityPolicy

#: Characters read from each of IDENTITY.md / SOUL.md at most.
MAX_PERSONA_CHARS = 32_000
PERSONA_FILES = ("IDENTITY.md", "SOUL.md")


def _read_persona(agent_workspace: Path, name: str) -> str:
    path = agent_workspace / name
    try:
        if not path.is_file():
            return ""
        return path.read_text(encoding="utf-8", errors="replace")[:MAX_PERSONA_CHARS].strip()
    except OSError:
        return ""


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
