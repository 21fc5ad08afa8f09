"""A gateway client's stdio MCP server: when it may start, and how it is started.

A stdio server is a command. One that a gateway client passed (allowed only
with ``[gateway] client_mcp_servers = "all"``) is therefore treated like the
shell tool, not like the operator's servers:

- it runs through the shell's Landlock trampoline (:mod:`services.agent.sandbox`)
  under the session's policy: the session roots, forbidden paths — always
  acpgate's config and data dirs — unreachable, writes only inside the roots
  unless ``full``. Without Landlock it does not start at all: unconfined it
  would be exactly the hole this closes;
- its environment — inherited and its own ``env`` — has no loader or
  interpreter variables (:mod:`services.common.loader_env`);
- ``readonly`` never starts it (it is command execution); ``supervised`` starts
  it only once the client approved it (``session/request_permission`` for
  :data:`MCP_START_TOOL`, asked before the session's next prompt turn, never
  during setup, which must not wait for a human); ``full`` starts it without
  asking.

The local stdio user's servers and the operator's are not gated here.
"""

from __future__ import annotations

import asyncio
import enum
import shlex
from typing import Any

from services.agent.enforce import needs_approval
from services.agent.mcp.launch import ClientGuard, Launch
from services.agent.sandbox import make_plan, sandboxed_argv
from services.common.loader_env import without_loader_variables
from services.common.mcp_servers import McpStdioServer

__all__ = ["MCP_START_TOOL", "StartGate", "Verdict", "approval_request"]

#: The tool name of the approval a client stdio server needs (``auto_approve`` and
#: ``always_ask`` patterns name it like any tool; "allow always" covers the session).
MCP_START_TOOL = "mcp_server_start"

NO_LANDLOCK = ("not started: this kernel has no Landlock to confine a gateway client's stdio "
               "server, and it never runs unconfined")
READONLY = ("not started: autonomy is readonly, and a gateway client's stdio server runs a "
            "command")
AWAITING = "not started yet: it starts once the user approves it, asked before the next prompt"


class Verdict(enum.Enum):
    """Whether a gated server may start: now, maybe later, or not in this session."""

    GO = "go"
    WAIT = "wait"
    NEVER = "never"


def approval_request(spec: McpStdioServer) -> tuple[str, dict[str, Any]]:
    """The permission request's summary and arguments: the full command line; of its
    ``env`` only the names (the values may be credentials)."""
    summary = (f"Start the MCP server `{spec.name}` the client passed (confined to the "
               f"session's roots): {shlex.join([spec.command, *spec.args])}")
    return summary, {"server": spec.name, "command": spec.command, "args": list(spec.args),
                     "env": [name for name, _ in spec.env]}


class StartGate:
    """The start rules of one gateway client's stdio server (see the module docstring)."""

    def __init__(self, spec: McpStdioServer, guard: ClientGuard) -> None:
        self._spec = spec
        self._guard = guard
        #: The client approved this server (for the rest of the session).
        self._approved = False

    async def check(self, *, ask: bool) -> tuple[Verdict, str]:
        """May the server start now? ``ask``: ask the client if approval is due (only
        from a prompt turn); otherwise a due approval means :attr:`Verdict.WAIT`."""
        if await asyncio.to_thread(self._guard.landlock) < 1:
            return Verdict.NEVER, NO_LANDLOCK
        policy = self._guard.policy()
        if policy.autonomy == "readonly":
            return Verdict.WAIT, READONLY
        if self._approved or not needs_approval(policy, MCP_START_TOOL):
            return Verdict.GO, ""
        if not ask:
            return Verdict.WAIT, AWAITING
        why = await self._guard.approve(self._spec)
        if why is not None:
            return Verdict.NEVER, f"not started: {why}"
        self._approved = True
        return Verdict.GO, ""

    async def command(self, launch: Launch) -> tuple[list[str], dict[str, str]]:
        """The argv (through the Landlock trampoline, under the policy in force) and the
        filtered environment the server is started with."""
        policy = self._guard.policy()
        plan = await asyncio.to_thread(make_plan, policy.workspace_dir, policy.allowed_roots,
                                       policy.forbidden_paths, policy.workspace_only)
        argv = sandboxed_argv(plan, [self._spec.command, *self._spec.args])
        return argv, without_loader_variables(launch.env, self._spec.env)
