"""Per-session state of the built-in agent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from services.agent.approval import ApprovalGate
from services.agent.conversation import Message
from services.agent.history import HistorySeed
from services.agent.mcp import SessionMcp
from services.agent.tools import SESSION_TOOLS
from services.agent.tools.base import Tool, ToolContext
from services.common.policy import SecurityPolicy


@dataclass
class AgentSession:
    """One ACP session: its policy, conversation, approvals, MCP servers and running turn.

    ``ceiling`` is the policy the edge sent; ``policy`` the one in force, which a
    ``session/set_mode`` may make more careful (services.agent.modes). ``model``
    is the session's model (config option ``model``).
    """

    id: str
    policy: SecurityPolicy
    gate: ApprovalGate
    context: ToolContext
    mcp: SessionMcp
    ceiling: SecurityPolicy
    model: str
    messages: list[Message] = field(default_factory=list)
    #: Tool call ids used so far (provider ids are made unique per session).
    call_ids: set[str] = field(default_factory=set)
    turn: asyncio.Task[Any] | None = None
    #: The history the edge is still sending (``_acpgate/history_append``), if any.
    seed: HistorySeed | None = None

    def seeded(self) -> None:
        """Take the seeded history as the conversation (no-op when none is pending)."""
        if self.seed is not None:
            self.messages = self.seed.finish()
            self.seed = None
            self.call_ids.update(c.id for m in self.messages for c in m.tool_calls)

    def apply_policy(self, policy: SecurityPolicy) -> None:
        """Put ``policy`` in force for the next tool call."""
        self.policy = policy
        self.context.policy = policy

    @property
    def busy(self) -> bool:
        """True while a prompt turn runs."""
        return self.turn is not None and not self.turn.done()

    def tools(self, builtin: dict[str, Tool]) -> dict[str, Tool]:
        """The tools of this session now: the built-in ones (the session tools only when
        the client serves them) and its MCP servers' tools."""
        if not self.context.session_tools:
            builtin = {n: t for n, t in builtin.items() if n not in SESSION_TOOLS}
        return {**builtin, **self.mcp.tools()}
