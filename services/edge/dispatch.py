"""One client connection of the dialect: classify, route, answer (SPEC §1).

:class:`DialectConnection` receives raw lines/frames, classifies them, routes
responses to the back-channel, and runs every request and notification in its
own task so a ``session/cancel`` is answered while a prompt streams. A request
is answered exactly once: the handler's result, its :class:`JsonRpcError`, or
-32603. What each method does lives in ``services.edge.handlers``; the
connection is handed that method table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from services.common.logs import get_logger
from services.common.protocol import INTERNAL_ERROR, METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND
from services.edge.backchannel import BackChannel
from services.edge.errors import not_found
from services.edge.framing import Frame, FrameKind, JsonRpcError, classify, error_line, result_line
from services.edge.runtime import EdgeRuntime
from services.edge.session import EdgeSession

log = get_logger("edge.dialect")

#: One dialect method: the connection it arrived on and its params → the result.
Handler = Callable[["DialectConnection", dict[str, Any]], Awaitable[Any]]


class DialectConnection:
    """One client connection speaking the dialect (stdio or one WebSocket)."""

    def __init__(self, runtime: EdgeRuntime, send: Callable[[str], Awaitable[None]],
                 *, methods: Mapping[str, Handler], default_agent: str = "",
                 principal: str = "") -> None:
        self.runtime = runtime
        #: Who this connection acts as ("" = the local operator; see serve_connection).
        self.principal = principal
        self._raw_send = send
        self._send_lock = asyncio.Lock()
        self.default_agent = default_agent.strip()
        self.backchannel = BackChannel(self.send)
        #: What the client said it can do in ``initialize`` (passed on to adapters).
        self.client_capabilities: dict[str, Any] = {}
        self.sessions: dict[str, EdgeSession] = {}
        self._methods = methods
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has released this connection's sessions."""
        return self._closed

    # ------------------------------------------------------------------ I/O

    async def send(self, line: str) -> None:
        """Write one message; a gone client raises ConnectionError."""
        await self.send_many([line])

    async def send_many(self, lines: list[str]) -> None:
        """Write several messages in order under one hold of the send lock (a replay
        of thousands of updates pays the lock once, not per line); a gone client raises
        ConnectionError."""
        if self._closed:
            raise ConnectionError("client connection closed")
        async with self._send_lock:
            for line in lines:
                await self._raw_send(line)

    async def _answer(self, line: str, code: int | None = None) -> None:
        if code is not None:
            self.runtime.metrics.count_error(code)
        try:
            await self.send(line)
        except (ConnectionError, OSError):
            log.debug("answer_dropped_client_gone")

    # ------------------------------------------------------------------ inbound

    def feed(self, line: str) -> None:
        """Handle one inbound line (never raises, never blocks)."""
        frame = classify(line)
        if frame.kind is FrameKind.SKIP:
            return
        if frame.kind is FrameKind.RESPONSE:
            self.backchannel.on_response(frame.message)
            return
        if frame.kind is FrameKind.ERROR:
            self._start(self._answer(error_line(frame.id, frame.error_code, frame.error_message),
                                     frame.error_code))
            return
        self._start(self._dispatch(frame))

    def _start(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dispatch(self, frame: Frame) -> None:
        is_request = frame.kind is FrameKind.REQUEST
        handler = self._methods.get(frame.method)
        try:
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=frame.method))
            result = await handler(self, frame.params)
        except JsonRpcError as exc:
            if is_request:
                await self._answer(error_line(frame.id, exc.code, exc.message), exc.code)
            return
        except asyncio.CancelledError:
            if is_request and not self._closed:
                await self._answer(error_line(frame.id, INTERNAL_ERROR, "Request cancelled"),
                                   INTERNAL_ERROR)
            raise
        except Exception:
            log.exception("handler_failed", method=frame.method)
            if is_request:
                await self._answer(error_line(frame.id, INTERNAL_ERROR, "Internal error"),
                                   INTERNAL_ERROR)
            return
        if is_request:
            await self._answer(result_line(frame.id, result))

    # ------------------------------------------------------------------ sessions

    def active_session(self, sid: str) -> EdgeSession:
        """This connection's active session ``sid``, else -32000 (and it is forgotten)."""
        session = self.sessions.get(sid)
        if session is None or session.released or \
                self.runtime.registry.active.get(sid) is not session:
            self.sessions.pop(sid, None)
            raise not_found(sid)
        return session

    # ------------------------------------------------------------------ end

    async def close(self, *, drain_secs: float = 15.0,
                    abort: asyncio.Event | None = None) -> None:
        """The client's input ended: finish what it asked, then release its sessions.

        Back-channel requests fail at once (nobody can answer them any more:
        the tools they guard are denied). Requests already read run on for up
        to ``drain_secs`` — a stdio client or CI runner may close stdin and
        keep reading — or until ``abort`` is set; then they are cancelled.
        Only after that are the connection's sessions released (adapters
        closed, rows kept), so a request still running never loses its session.
        """
        self.backchannel.close()
        if self._tasks:
            waiting = asyncio.ensure_future(asyncio.wait(list(self._tasks), timeout=drain_secs))
            watchers: set[asyncio.Future[Any]] = {waiting}
            if abort is not None:
                watchers.add(asyncio.ensure_future(abort.wait()))
            await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
            for watcher in watchers:
                watcher.cancel()
            pending = [t for t in self._tasks if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await self._release_all()
        self._closed = True

    async def _release_all(self) -> None:
        sessions = list(self.sessions.values())
        self.sessions.clear()
        await asyncio.gather(*(self.runtime.deactivate(s, "disconnect") for s in sessions),
                             return_exceptions=True)
