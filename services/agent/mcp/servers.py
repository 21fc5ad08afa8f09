"""A session's MCP servers: the operator's and the client's, started together, offered as tools.

The list a session runs is ``[agents.<alias>] mcp_servers`` (the operator's,
always) followed by the ``mcpServers`` the client passed. Entries that break
the ACP shape, and names that repeat (also after the reduction to tool-name
characters), are refused with a sentence; refusals and servers that failed to
start are told to the model in the system prompt (:meth:`SessionMcp.notes`), and
a call of a tool of such a server (``<server>__…``) gets the same sentence.

All servers start concurrently, each bounded by the startup timeout, so a dead
one costs a session at most that long and never fails it. A gateway client's
servers run under its rules (:class:`~services.agent.mcp.launch.Planned`): a
stdio one that waits for the client's approval starts before the next prompt
turn (:meth:`SessionMcp.before_turn`), never during setup.

The SDK (connections, tools) is imported on the first session that has a
server: it takes about two seconds, which an agent without MCP servers (and
every session of one) should not pay at startup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from services.agent.mcp.launch import Launch, Planned, State
from services.agent.mcp.naming import server_prefix, tool_name
from services.common.logs import get_logger
from services.common.mcp_servers import redacted

if TYPE_CHECKING:
    from services.agent.mcp.connection import McpConnection
    from services.agent.mcp.tool import McpTool

__all__ = ["SessionMcp"]

log = get_logger("agent.mcp")


class SessionMcp:
    """The MCP servers of one session."""

    def __init__(self, launch: Launch) -> None:
        self._launch = launch
        self._connections: list[McpConnection] = []
        self._refused: list[str] = []
        #: The refusals of the entries last passed (a part of "the same list").
        self._refused_passed: list[str] = []
        #: The servers last started (what a resume without a list keeps).
        self.planned: tuple[Planned, ...] = ()

    @property
    def connections(self) -> list[McpConnection]:
        """The accepted servers, in list order."""
        return list(self._connections)

    async def start(self, planned: Sequence[Planned], refused: Sequence[str] = ()) -> None:
        """Stop whatever runs, then start ``planned`` (``refused``: entries already rejected)."""
        await self.close()
        self.planned = tuple(planned)
        self._refused_passed = list(refused)
        self._refused = list(refused)
        self._connections = []
        accepted: list[Planned] = []
        prefixes: dict[str, str] = {}
        for entry in planned:
            spec = entry.spec
            prefix = server_prefix(spec.name)
            if prefix in prefixes:
                self._refused.append(
                    f"MCP server `{spec.name}` refused: its name clashes with `{prefixes[prefix]}` "
                    "(server names must differ in letters, digits, `_` or `-`)")
                continue
            prefixes[prefix] = spec.name
            accepted.append(entry)
        for line in self._refused:
            log.warning("mcp_refused", session_id=self._launch.session_id, reason=line)
        if not accepted:
            return
        from services.agent.mcp.connection import McpConnection  # the SDK: see module doc

        self._connections = [McpConnection(e.spec, self._launch, e.client) for e in accepted]
        for conn in self._connections:
            shown = redacted(conn.spec)
            log.info("mcp_start", session_id=self._launch.session_id, server=conn.name,
                     transport=conn.transport, command=shown.get("command", ""))
        await asyncio.gather(*(c.start() for c in self._connections))

    async def resume(self, planned: Sequence[Planned], refused: Sequence[str] = ()) -> None:
        """A resume/load of a live session with a list: another list (or the same one under
        other rules) replaces the running servers; the same one keeps them and starts again
        those that are down."""
        if tuple(planned) == self.planned and list(refused) == self._refused_passed:
            await self.restart_unready()
        else:
            await self.start(planned, refused)

    async def restart_unready(self) -> None:
        """Start again every server that is not ready (a resume that keeps the list)."""
        await asyncio.gather(*(c.start() for c in self._connections
                               if c.state is not State.READY))

    async def before_turn(self) -> None:
        """Before a prompt turn: start the pending servers that may start now (asking the
        client, one server at a time, where its approval is due), then :meth:`refresh`."""
        for conn in self._connections:
            if conn.state is State.PENDING:
                await conn.admit_pending()
        await self.refresh()

    async def refresh(self) -> None:
        """List again the tools of servers that announced a change (before a turn)."""
        await asyncio.gather(*(c.refresh_tools() for c in self._connections if c.tools_stale))

    async def close(self) -> None:
        """Stop every server (concurrently)."""
        await asyncio.gather(*(c.close() for c in self._connections))

    def tools(self) -> dict[str, McpTool]:
        """Every known tool by exposed name; a lost server's tools stay (a call restarts it)."""
        out: dict[str, McpTool] = {}
        if not self._connections:
            return out
        from services.agent.mcp.tool import McpTool  # the SDK: see module doc

        for conn in self._connections:
            if conn.state is State.CLOSED:
                continue
            for remote in conn.tools:
                name = tool_name(conn.name, remote.name)
                if name not in out:  # two remote names that reduce alike: the first wins
                    out[name] = McpTool(name, conn, remote)
        return out

    def notes(self) -> list[str]:
        """Sentences for the system prompt: refused entries and servers that are not ready."""
        lines = list(self._refused)
        for conn in self._connections:
            if conn.state is State.FAILED:
                lines.append(f"MCP server `{conn.name}` is unavailable: {conn.reason}")
            elif conn.state is State.PENDING:
                lines.append(f"MCP server `{conn.name}` is {conn.reason}")
            elif conn.state is State.LOST:
                lines.append(f"MCP server `{conn.name}` stopped ({conn.reason}); calling one "
                             "of its tools starts it again")
        return lines

    def unavailable(self, tool: str) -> str | None:
        """Why ``tool`` (a ``<server>__…`` name the session does not offer) cannot be called."""
        for conn in self._connections:
            if tool.startswith(server_prefix(conn.name)) and conn.state is not State.READY:
                return (f"The MCP server `{conn.name}` is unavailable"
                        + (f": {conn.reason}" if conn.reason else "."))
        return None
