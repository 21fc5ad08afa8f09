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
from services.common.policy import SecurityPolicy, cap_policy


@dataclass
class AgentSession:
    """One ACP session: its policy, conversation, approvals, MCP servers and running turn.

    ``ceiling`` is the policy the edge sent; ``chosen`` the one its mode put in
    force, which a ``session/set_mode`` may make more careful (services.agent.modes);
    ``policy`` the one the tools obey now: ``chosen`` under the running turn's
    ``turn_cap`` (a turn another session started runs at most at the
    sender's autonomy). ``model`` is the session's model (config option ``model``).
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
    #: The autonomy the running turn may use at most ("" = no cap: the mode's).
    turn_cap: str = ""
    #: The history the edge is still sending (``_acpgate/history_append``), if any.
    seed: HistorySeed | None = None
    chosen: SecurityPolicy = field(init=False)

    def __post_init__(self) -> None:
        self.chosen = self.policy

    def seeded(self) -> None:
        """Take the seeded history as the conversation (no-op when none is pending)."""
        if self.seed is not None:
            self.messages = self.seed.finish()
            self.seed = None
            self.call_ids.update(c.id for m in self.messages for c in m.tool_calls)

    def apply_policy(self, policy: SecurityPolicy) -> None:
        """Put the mode's ``policy`` in force for the next tool call (under the turn's cap)."""
        self.chosen = policy
        self._enforce()

    def cap_turn(self, level: str) -> None:
        """Cap the autonomy of the turn about to run at ``level`` ("" lifts the cap)."""
        self.turn_cap = level
        self._enforce()

    def turn_ended(self, turn: asyncio.Task[Any]) -> None:
        """``turn`` is over: the next turn runs at the mode's level again (unless the next
        one started already, with a cap of its own)."""
        if self.turn is turn:
            self.cap_turn("")

    def _enforce(self) -> None:
        in_force = cap_policy(self.chosen, self.turn_cap) if self.turn_cap else self.chosen
        self.policy = in_force
        self.context.policy = in_force

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
