"""One MCP server of one session: start it, list its tools, call them, stop it.

The SDK's :class:`mcp.Client` must be entered and left in one task (its cancel
scopes are task-bound), while a session starts, calls and closes its servers
from different request tasks. So each run of a server lives in its own task,
:meth:`McpConnection._serve`, which enters the client, publishes it, and waits
until it is told to stop or the server goes away; calls from the turn task use
the published client.

States: ``starting`` → ``ready``; a gateway client's stdio server may first be
``pending`` (readonly, or the client's approval is due: asked by
:meth:`McpConnection.admit_pending` before a prompt turn) or refused for the
session (:mod:`services.agent.mcp.confine`); a server that exits or drops the connection
while ready is ``lost`` and is started again by the next call of one of its
tools; a start that fails (the command cannot run, the handshake fails, no
answer within the startup timeout) leaves it ``failed``, retried on a call
until :data:`MAX_FAILED_STARTS` starts in a row have failed. Every failure is a
sentence (:class:`McpUnavailable`, :class:`McpCallFailed`) that the tool returns
to the model and the client; nothing here ends the session.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from services.agent.mcp.confine import StartGate, Verdict
from services.agent.mcp.http_guard import (
    HTTP_READ_TIMEOUT_SECS,
    HTTP_TIMEOUT_SECS,
    ClientFactory,
    checked_client_factory,
    open_http,
)
from services.agent.mcp.launch import Launch, McpCallFailed, McpUnavailable, State
from services.agent.mcp.stdio import StdioExit, StdioStartError, open_stdio
from services.common.logs import get_logger
from services.common.mcp_policy import ClientMcpRules
from services.common.mcp_servers import McpServerSpec, McpStdioServer
from services.common.net_targets import TargetRefused

__all__ = ["MAX_FAILED_STARTS", "McpConnection"]

log = get_logger("agent.mcp")

CLIENT_NAME = "acpgate-agent"
#: Consecutive failed starts after which calls stop trying to start the server again.
MAX_FAILED_STARTS = 3
#: How long a graceful stop may take before the server's task is cancelled.
STOP_SECS = 10.0
#: Pages of ``tools/list`` read at most (a server that pages forever cannot hang a start).
MAX_TOOL_PAGES = 100
#: Characters of a server's log message kept in our log.
MAX_LOG_CHARS = 4000


class _StartFailed(Exception):
    """Raised inside the serve task before the server became ready."""


def _describe(exc: BaseException) -> str:
    """A short, secret-free sentence for why a start or a call failed."""
    if isinstance(exc, StdioStartError | _StartFailed | McpUnavailable | TargetRefused):
        return str(exc)
    if isinstance(exc, MCPError):
        return f"it answered with error {exc.code}: {exc.message}"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from the server"
    if isinstance(exc, httpx2.HTTPError | OSError):
        return f"cannot reach the server ({type(exc).__name__})"
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else None
        return _describe(inner) if inner is not None else type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class McpConnection:
    """One server of one session (see the module docstring for its states).

    ``client`` holds the rules of a gateway client's server (confined stdio, checked
    HTTP targets); None for a trusted one.
    """

    def __init__(self, spec: McpServerSpec, launch: Launch,
                 client: ClientMcpRules | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.state = State.IDLE
        #: Why the server is not ready (a sentence), "" while it is.
        self.reason = ""
        #: The server's tools as last listed (kept while lost, so calls can restart it).
        self.tools: list[mcp_types.Tool] = []
        #: The server said its tool list changed: list again before the next turn.
        self.tools_stale = False
        self._launch = launch
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._exit: StdioExit | None = None
        self._lock = asyncio.Lock()
        self._failed_starts = 0
        #: Set when the server may not start in this session at all (the reason says why).
        self._never = False
        guard = launch.guard if client is not None and client.remote else None
        self._gate = StartGate(spec, guard) \
            if guard is not None and isinstance(spec, McpStdioServer) else None
        self._http_factory = checked_client_factory(client.allow_list(), guard.resolve) \
            if guard is not None and client is not None else ClientFactory()
        if client is not None and client.remote and guard is None:
            self._refuse("not started: the agent cannot apply the gateway client's rules")

    @property
    def transport(self) -> str:
        """``stdio``, ``http`` or ``sse``."""
        return self.spec.transport

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start (or restart) the server; never raises: the outcome is :attr:`state`."""
        async with self._lock:
            if await self._admitted(ask=False):
                await self._start_locked()

    async def admit_pending(self) -> None:
        """A pending server (see the module docstring): ask the client if its approval is due,
        start it if it may start now. From a prompt turn only: asking waits for a human."""
        async with self._lock:
            if self.state is State.PENDING and await self._admitted(ask=True):
                await self._start_locked()

    async def _admitted(self, *, ask: bool) -> bool:
        """Whether a gated server may start now; if not, its state and reason say why."""
        if self._never:
            return False
        if self._gate is None:
            return True
        verdict, reason = await self._gate.check(ask=ask)
        if verdict is Verdict.GO:
            return True
        if verdict is Verdict.NEVER:
            self._refuse(reason)
        else:
            self.state, self.reason = State.PENDING, reason
        return False

    def _refuse(self, reason: str) -> None:
        self._never = True
        self.state, self.reason = State.FAILED, reason
        log.warning("mcp_not_started", session_id=self._launch.session_id, server=self.name,
                    reason=reason)

    async def close(self) -> None:
        """Stop the server for good (a closed connection takes no calls)."""
        async with self._lock:
            self.state = State.CLOSED
            self.reason = "the session closed"
            await self._shutdown(graceful=True)

    async def ensure_ready(self) -> None:
        """Start the server again if it was lost or failed; :class:`McpUnavailable` if it cannot."""
        async with self._lock:
            if self.state is State.READY:
                return
            if self.state is State.CLOSED:
                raise McpUnavailable(f"The MCP server `{self.name}` was stopped with its session.")
            if not await self._admitted(ask=False):
                raise McpUnavailable(f"The MCP server `{self.name}` is unavailable: {self.reason}")
            if self._failed_starts >= MAX_FAILED_STARTS:
                raise McpUnavailable(
                    f"The MCP server `{self.name}` failed to start {self._failed_starts} times "
                    f"in a row and is not started again in this session: {self.reason}")
            log.info("mcp_restart", session_id=self._launch.session_id, server=self.name,
                     previous=self.state.value)
            await self._start_locked()
            if self.state is not State.READY:
                raise McpUnavailable(f"The MCP server `{self.name}` is unavailable: {self.reason}")

    async def _start_locked(self) -> None:
        await self._shutdown(graceful=True)
        self.state = State.STARTING
        self.reason = ""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        self._stop = stop
        self._exit = StdioExit() if isinstance(self.spec, McpStdioServer) else None
        self._task = asyncio.create_task(self._serve(ready, stop, self._exit),
                                         name=f"mcp:{self._launch.session_id}:{self.name}")
        timeout = self._launch.startup_timeout
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            ready.cancel()
            self._failed(f"it did not start within {timeout:g} seconds")
            await self._shutdown(graceful=False)
            return
        except asyncio.CancelledError:
            ready.cancel()
            await self._shutdown(graceful=False)
            raise
        except Exception as exc:
            self._failed(_describe(exc))
            await self._shutdown(graceful=False)
            return
        self.state = State.READY
        self._failed_starts = 0
        log.info("mcp_ready", session_id=self._launch.session_id, server=self.name,
                 transport=self.transport, tools=len(self.tools))

    def _failed(self, reason: str) -> None:
        self.state = State.FAILED
        self.reason = reason
        self._failed_starts += 1
        log.warning("mcp_start_failed", session_id=self._launch.session_id, server=self.name,
                    transport=self.transport, reason=reason)

    def _lost(self, reason: str) -> None:
        if self.state is State.READY:
            self.state = State.LOST
            self.reason = reason
            log.warning("mcp_lost", session_id=self._launch.session_id, server=self.name,
                        reason=reason)

    async def _shutdown(self, *, graceful: bool) -> None:
        """End the current run's task: let it leave the client cleanly, cancel it if it hangs."""
        task, self._task = self._task, None
        if task is None:
            return
        if self._stop is not None:
            self._stop.set()
        if graceful:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), STOP_SECS)
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_SECS)
        self._client = None

    # ------------------------------------------------------------------ the run

    async def _transport(self, exit_info: StdioExit | None) -> AbstractAsyncContextManager[Any]:
        spec = self.spec
        if isinstance(spec, McpStdioServer):
            assert exit_info is not None
            argv, env = None, {**self._launch.env, **dict(spec.env)}
            if self._gate is not None:  # a gateway client's: confined, filtered
                argv, env = await self._gate.command(self._launch)
            return open_stdio(spec, cwd=self._launch.cwd, env=env, argv=argv,
                              on_stderr=self._on_stderr, exit_info=exit_info)
        if spec.transport == "sse":
            return sse_client(spec.url, headers=dict(spec.headers), timeout=HTTP_TIMEOUT_SECS,
                              sse_read_timeout=HTTP_READ_TIMEOUT_SECS,
                              httpx_client_factory=self._http_factory)
        return open_http(spec, self._http_factory)

    async def _serve(self, ready: asyncio.Future[None], stop: asyncio.Event,
                     exit_info: StdioExit | None) -> None:
        """Enter the client, list the tools, publish, wait for stop or the server's end."""
        client: Client | None = None
        try:
            client = Client(await self._transport(exit_info), client_info=mcp_types.Implementation(
                                name=CLIENT_NAME, version=self._launch.client_version),
                            message_handler=self._on_message, logging_callback=self._on_log,
                            cache=None)
            async with client:
                self.tools = await _list_tools(client)
                self.tools_stale = False
                self._client = client
                if ready.done():  # the start gave up meanwhile
                    return
                ready.set_result(None)
                ended = [asyncio.create_task(stop.wait())]
                if exit_info is not None:
                    ended.append(asyncio.create_task(exit_info.closed.wait()))
                try:
                    await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for t in ended:
                        t.cancel()
                if not stop.is_set() and exit_info is not None:
                    self._lost(exit_info.describe())
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the SDK's task groups raise exception groups
            if not ready.done():
                ready.set_exception(_StartFailed(await self._start_error(exc, exit_info)))
            elif not stop.is_set():
                self._lost(_describe(exc))
            else:
                log.debug("mcp_stop_error", session_id=self._launch.session_id, server=self.name,
                          error=type(exc).__name__)
        finally:
            if client is not None and self._client is client:
                self._client = None

    @staticmethod
    async def _start_error(exc: BaseException, exit_info: StdioExit | None) -> str:
        """Why a start failed; a stdio server that went away says how it ended."""
        if exit_info is not None and exit_info.pid:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await exit_info.closed.wait()
            if exit_info.closed.is_set():
                return f"it stopped before the MCP handshake finished ({exit_info.describe()})"
        return _describe(exc)

    # ------------------------------------------------------------------ calls

    async def refresh_tools(self) -> None:
        """List the tools again after the server announced a change (keeps the old list on error)."""
        client = self._client
        if client is None or not self.tools_stale:
            return
        self.tools_stale = False
        try:
            async with asyncio.timeout(self._launch.startup_timeout):
                self.tools = await _list_tools(client)
        except Exception as exc:
            log.warning("mcp_relist_failed", session_id=self._launch.session_id, server=self.name,
                        error=_describe(exc))

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``tool``; :class:`McpUnavailable` / :class:`McpCallFailed` with the reason."""
        await self.ensure_ready()
        client = self._client
        if client is None:
            raise McpUnavailable(f"The MCP server `{self.name}` is unavailable: {self.reason}")
        timeout = self._launch.call_timeout
        try:
            return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpCallFailed(f"The MCP server `{self.name}` did not answer `{tool}` "
                                    f"within {timeout:g} seconds.") from None
            if exc.code == mcp_types.CONNECTION_CLOSED:
                how = await self._how_it_ended()
                self._lost(how)
                raise McpCallFailed(f"The MCP server `{self.name}` stopped while running "
                                    f"`{tool}` ({how}).") from None
            raise McpCallFailed(f"The MCP server `{self.name}` refused `{tool}`: "
                                f"error {exc.code}: {exc.message}") from None
        except ValidationError:
            raise McpCallFailed(f"The MCP server `{self.name}` answered `{tool}` with a result "
                                "that is not valid MCP.") from None
        except (httpx2.HTTPError, OSError) as exc:
            self._lost(_describe(exc))
            raise McpCallFailed(f"The MCP server `{self.name}` could not be reached for "
                                f"`{tool}`: {_describe(exc)}.") from None

    async def _how_it_ended(self) -> str:
        exit_info = self._exit
        if exit_info is None:
            return "the connection closed"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await exit_info.closed.wait()
        return exit_info.describe()

    # ------------------------------------------------------------------ from the server

    def _on_stderr(self, line: str) -> None:
        log.info("mcp_stderr", session_id=self._launch.session_id, server=self.name, line=line)

    async def _on_log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        log.info("mcp_server_log", session_id=self._launch.session_id, server=self.name,
                 level=params.level, message=str(params.data)[:MAX_LOG_CHARS])

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.tools_stale = True
        elif isinstance(message, Exception):
            log.info("mcp_bad_message", session_id=self._launch.session_id, server=self.name,
                     error=type(message).__name__)


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools
