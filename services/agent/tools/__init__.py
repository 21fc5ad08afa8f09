"""The built-in agent's tools and the registry the turn loop uses."""

from __future__ import annotations

from services.agent.providers.base import ToolSpec
from services.agent.tools.ask_user import AskUserTool
from services.agent.tools.base import Tool
from services.agent.tools.deliver import DeliverFileTool
from services.agent.tools.escalate import EscalateToHumanTool
from services.agent.tools.read import FileReadTool
from services.agent.tools.search import ContentSearchTool, GlobTool
from services.agent.tools.session_status import SessionStatusTool
from services.agent.tools.sessions_history import SessionsHistoryTool
from services.agent.tools.sessions_list import SessionsListTool
from services.agent.tools.sessions_send import SessionsSendTool
from services.agent.tools.sessions_spawn import SessionsSpawnTool
from services.agent.tools.shell import ShellTool
from services.agent.tools.skill_load import SkillLoadTool
from services.agent.tools.todo import TodoTool
from services.agent.tools.write import FileEditTool, FileWriteTool

__all__ = ["SESSION_TOOLS", "Tool", "all_tools", "tool_specs"]

#: The tools that reach other sessions through the edge (``sessions_call``): offered
#: only when the client serves them (``clientCapabilities._meta.acpgate.sessionTools``).
SESSION_TOOLS = frozenset({"sessions_spawn", "sessions_list", "sessions_history",
                           "sessions_send", "session_status"})


def all_tools() -> dict[str, Tool]:
    """Every tool, by name. ACP sessions have no memory tools (SPEC §12)."""
    tools: list[Tool] = [
        ShellTool(), FileReadTool(), FileWriteTool(), FileEditTool(), GlobTool(),
        ContentSearchTool(), DeliverFileTool(), AskUserTool(), EscalateToHumanTool(),
        SkillLoadTool(), TodoTool(),
        SessionsSpawnTool(), SessionsListTool(), SessionsHistoryTool(), SessionsSendTool(),
        SessionStatusTool(),
    ]
    return {t.name: t for t in tools}


def tool_specs(tools: dict[str, Tool], *, readonly: bool) -> list[ToolSpec]:
    """What the model is offered; readonly sessions are not offered mutating tools."""
    return [
        ToolSpec(t.name, t.description, t.parameters)
        for t in tools.values()
        if not (readonly and t.mutating)
    ]


_KINDS = {name: tool.kind for name, tool in all_tools().items()}


def tool_kind(name: str) -> str:
    """The ACP ToolKind of a tool name (``other`` for unknown names)."""
    return _KINDS.get(name, "other")
