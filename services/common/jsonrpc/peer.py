"""One JSON-RPC 2.0 connection, both directions at once (SPEC §1).

:class:`JsonRpcPeer` is the one implementation behind every JSON-RPC connection acpgate
has: the edge toward each client and toward each adapter, and the built-in agent toward
its client. What differs between them is injected, never re-implemented:

- the transport: ``send(line)``, a coroutine that writes one whole line in call order
  (``ConnectionError``/``OSError`` once the other side is gone), and the lines read,
  fed one by one (:meth:`feed`, :meth:`serve`) or a batch at a time (:meth:`feed_batch`);
- the id scheme of our own requests (``zc-out-N`` strings or integers);
- the handler serving the other side's requests and notifications, and
  optionally a sink taking runs of notifications in stream order (the edge's
  ``session/update`` relay, kept on raw dicts);
- whether an error that carries no id (a parse error) is answered: the server sides
  answer it (SPEC §1); the edge toward an adapter only logs it (no garbage ping-pong);
- whether a request of ours that we stop waiting for (timed out, caller cancelled) is
  withdrawn with a notification (ACP ``$/cancel_request``).

The other side's requests being served are known by id: its handler may look one up
(:meth:`JsonRpcPeer.serving`) or withdraw it (:meth:`JsonRpcPeer.withdraw`: cancelled
and answered -32800 ``Request cancelled``) — what a ``$/cancel_request`` means is the
handler's to decide.

Every line goes through :func:`~services.common.jsonrpc.wire.classify`, so bad input is
treated alike everywhere. Each request and notification runs in its own task (a
``session/cancel`` is served while a prompt streams) — with ``max_running``, at most that
many at once: :meth:`serve` and :meth:`feed_batch` read no further line until one
finishes, so the other side cannot pile up calls (a request whose method is ``uncounted``
runs beside the bound: one whose handler may wait for a later line of this very
connection, which a stopped reader would never deliver) — and every request is answered exactly once: its result (an
:class:`~services.common.jsonrpc.wire.Answered` one runs its ``then`` after the answer
is written), its :class:`JsonRpcError`, -32603 ``Internal error`` (the cause is logged,
never sent), -32603 ``Request cancelled`` when the connection closes first, or -32800
``Request cancelled`` when the other side withdrew it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from services.common.jsonrpc.outbound import IdSource, PeerClosed, PendingRequests
from services.common.jsonrpc.wire import (
    Answered,
    Frame,
    FrameKind,
    JsonRpcError,
    JsonRpcId,
    classify,
    classify_message,
    error_line,
    notification_line,
    request_line,
    result_line,
)
from services.common.logs import get_logger
from services.common.protocol import (
    INTERNAL_ERROR,
    JSONRPC_VERSION,
    MSG_INTERNAL_ERROR,
    MSG_REQUEST_CANCELLED,
    REQUEST_CANCELLED,
)

log = get_logger("jsonrpc")

#: Writes one line (no newline) to the other side; ConnectionError/OSError once it is gone.
Send = Callable[[str], Awaitable[None]]
#: Consecutive notifications ``(method, params)``, in stream order.
Notes = list[tuple[str, dict[str, Any]]]
NotificationSink = Callable[[Notes], Awaitable[None]]

#: The id of the other side's request whose handler runs in this task (None elsewhere):
#: what a handler that must remember the request (to answer it later) reads.
_SERVING_ID: ContextVar[JsonRpcId | None] = ContextVar("jsonrpc_serving_id", default=None)


def serving_id() -> JsonRpcId | None:
    """The id of the other side's request being served by the calling task, if any."""
    return _SERVING_ID.get()


class Handler(Protocol):
    """Serves the other side's calls; raise :class:`JsonRpcError` for an error answer."""

    async def __call__(self, method: str, params: dict[str, Any], notification: bool) -> Any:
        """Handle one request (``notification``: no answer is expected, none is sent)."""
        ...


@dataclass
class _Served:
    """One of the other side's requests while its handler runs."""

    method: str
    params: dict[str, Any]
    task: asyncio.Task[None]
    withdrawn: bool = False


def _served_key(req_id: Any) -> str | None:
    """The key of an inbound request: its id's string form, as answers are matched (SPEC §1)."""
    if isinstance(req_id, bool) or not isinstance(req_id, str | int | float):
        return None
    return str(req_id)


class JsonRpcPeer:
    """One JSON-RPC connection over an injected transport."""

    def __init__(self, send: Send, handler: Handler, *, next_id: IdSource,
                 notifications: NotificationSink | None = None,
                 answer_unidentified: bool = True,
                 withdraw_method: str | None = None,
                 on_error: Callable[[int], None] | None = None,
                 label: str = "peer", max_running: int | None = None,
                 uncounted: frozenset[str] = frozenset()) -> None:
        self._send = send
        self._handler = handler
        self._notifications = notifications
        self._answer_unidentified = answer_unidentified
        self._withdraw_method = withdraw_method
        self._on_error = on_error
        self._label = label
        self.pending = PendingRequests(next_id)
        self._tasks: set[asyncio.Task[None]] = set()
        self._max_running = max_running
        self._uncounted = uncounted
        #: The running tasks that count toward ``max_running``.
        self._counted: set[asyncio.Task[None]] = set()
        #: Set while fewer than ``max_running`` handlers run (what :meth:`serve` waits on).
        self._room = asyncio.Event()
        self._room.set()
        self._served: dict[str, _Served] = {}
        self._output_gone = False
        #: Requests of ours given up on, whose withdrawal is still to be sent (one task
        #: sends them in order: a burst of withdrawals is one waiting send, not one each).
        self._withdrawals: deque[JsonRpcId] = deque()
        self._withdrawing: asyncio.Task[None] | None = None
        #: Given each answer to an id this peer never asked (or gave up on), when set: an
        #: answer to what a predecessor of this connection asked (a re-adopted adapter).
        self.unmatched: Callable[[dict[str, Any]], None] | None = None

    # ------------------------------------------------------------------ inbound

    def feed(self, line: str | bytes) -> None:
        """Handle one inbound line or frame (never raises, never blocks)."""
        self._route(classify(line))

    async def serve(self, lines: AsyncIterator[str]) -> None:
        """Feed every line until ``lines`` ends; then our open requests fail (:class:`PeerClosed`).

        Answers to what was read still go out afterwards: a client that closed
        its side may still read them (see :meth:`drain`).
        """
        try:
            async for line in lines:
                self.feed(line)
                if not self._room.is_set():
                    await self._room.wait()
        finally:
            self.close_outbound(lambda: PeerClosed("the other side closed the connection"))

    async def feed_batch(self, lines: Iterable[str]) -> None:
        """Handle lines that arrived together: runs of notifications go to the sink as one call.

        Stream order is kept: a run is delivered (awaited) before the request
        or response that ends it is routed. The common case, a well-formed
        notification, is recognised inline on the decoded dict — the same
        answer :func:`classify_message` gives it, without building a Frame.
        """
        sink = self._notifications
        if sink is None:
            for line in lines:
                self.feed(line)
                if not self._room.is_set():
                    await self._room.wait()
            return
        notes: Notes = []
        append = notes.append
        loads = orjson.loads
        version = JSONRPC_VERSION
        for line in lines:
            try:
                obj = loads(line)
            except orjson.JSONDecodeError:
                frame = classify(line)
            else:
                if type(obj) is dict and obj.get("id") is None and obj.get("jsonrpc") == version:
                    method = obj.get("method")
                    if type(method) is str:
                        params = obj.get("params")
                        append((method, params if type(params) is dict else {}))
                        continue
                frame = classify_message(obj, line)
            if frame.kind is FrameKind.SKIP:
                continue
            if frame.kind is FrameKind.NOTIFICATION:
                append((frame.method, frame.params))
                continue
            if notes:  # what came before is delivered before this request/response
                await self._deliver(notes)
                notes = []
                append = notes.append
            self._route(frame)
            if not self._room.is_set():  # max_running reached: read on once one finished
                await self._room.wait()
        if notes:
            await self._deliver(notes)

    def _route(self, frame: Frame) -> None:
        kind = frame.kind
        if kind is FrameKind.REQUEST:
            task = self._start(self._serve(frame.id, frame.method, frame.params, False),
                               counted=frame.method not in self._uncounted)
            key = _served_key(frame.id)
            if key is not None:
                self._served[key] = _Served(frame.method, frame.params, task)
        elif kind is FrameKind.NOTIFICATION:
            if self._notifications is not None:
                self._start(self._deliver([(frame.method, frame.params)]))
            else:
                self._start(self._serve(None, frame.method, frame.params, True))
        elif kind is FrameKind.RESPONSE:
            if not self.pending.settle(frame.message):
                if self.unmatched is not None and isinstance(frame.message, dict):
                    self.unmatched(frame.message)
                    return
                log.debug("response_for_unknown_id_dropped", peer=self._label)
        elif kind is FrameKind.ERROR:
            if frame.id is None and not self._answer_unidentified:
                log.warning("bad_line_dropped", peer=self._label, detail=frame.error_message)
                return
            self._start(self._answer(error_line(frame.id, frame.error_code, frame.error_message),
                                     frame.error_code))

    def _start(self, coro: Awaitable[None], *, counted: bool = True) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        if counted:
            self._counted.add(task)
            if self._max_running is not None and len(self._counted) >= self._max_running:
                self._room.clear()
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._counted.discard(task)
        if self._max_running is None or len(self._counted) < self._max_running:
            self._room.set()

    async def _deliver(self, notes: Notes) -> None:
        assert self._notifications is not None
        try:
            await self._notifications(notes)
        except Exception:
            log.exception("notification_sink_failed", peer=self._label, method=notes[0][0],
                          count=len(notes))

    async def _serve(self, req_id: JsonRpcId, method: str, params: dict[str, Any],
                     notification: bool) -> None:
        if not notification:
            _SERVING_ID.set(req_id)  # this task's own context: the handler may read it
        try:
            result = await self._handler(method, params, notification)
        except JsonRpcError as exc:
            if not notification:
                await self._answer(error_line(req_id, exc.code, exc.message, exc.data), exc.code)
            return
        except asyncio.CancelledError:
            if not notification:
                if self._withdrawn(req_id):  # the other side asked for it: answered, done
                    await self._answer(error_line(req_id, REQUEST_CANCELLED,
                                                  MSG_REQUEST_CANCELLED), REQUEST_CANCELLED)
                    return
                await self._answer(error_line(req_id, INTERNAL_ERROR, MSG_REQUEST_CANCELLED),
                                   INTERNAL_ERROR)
            raise
        except Exception:
            log.exception("handler_failed", peer=self._label, method=method)
            if not notification:
                await self._answer(error_line(req_id, INTERNAL_ERROR, MSG_INTERNAL_ERROR),
                                   INTERNAL_ERROR)
            return
        finally:
            if not notification:
                self._forget_served(req_id)
        then = result.then if isinstance(result, Answered) else None
        if not notification:
            await self._answer(result_line(req_id, result.result if then else result))
        if then is not None:
            await then()

    def serving(self, req_id: Any) -> tuple[str, dict[str, Any]] | None:
        """The method and params of the other side's request ``req_id`` while its handler
        runs (None: unknown, or answered already)."""
        served = self._find_served(req_id)
        return (served.method, served.params) if served is not None else None

    def withdraw(self, req_id: Any) -> bool:
        """The other side withdrew its request ``req_id`` (ACP ``$/cancel_request``): cancel
        its handler; the request is answered -32800 ``Request cancelled``. False for an id
        that is not being served (unknown, or answered already)."""
        served = self._find_served(req_id)
        if served is None:
            return False
        served.withdrawn = True
        served.task.cancel()
        return True

    def _find_served(self, req_id: Any) -> _Served | None:
        key = _served_key(req_id)
        served = self._served.get(key) if key is not None else None
        return served if served is not None and not served.task.done() else None

    def _withdrawn(self, req_id: JsonRpcId) -> bool:
        served = self._find_served(req_id)
        return served is not None and served.withdrawn and served.task is asyncio.current_task()

    def _forget_served(self, req_id: JsonRpcId) -> None:
        key = _served_key(req_id)
        if key is not None and (served := self._served.get(key)) is not None \
                and served.task is asyncio.current_task():
            del self._served[key]

    # ------------------------------------------------------------------ outbound

    async def _answer(self, line: str, code: int | None = None) -> None:
        if code is not None and self._on_error is not None:
            self._on_error(code)
        await self._write(line)

    async def _write(self, line: str) -> bool:
        """Send one line; False (and our open requests fail) once the other side is gone."""
        if self._output_gone:
            return False
        try:
            await self._send(line)
        except (ConnectionError, OSError) as exc:
            log.info("peer_output_gone", peer=self._label, error=type(exc).__name__)
            self._output_gone = True
            self.close_outbound(lambda: PeerClosed("the other side stopped reading"))
            return False
        return True

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification (dropped once the other side is gone)."""
        await self._write(notification_line(method, params))

    async def request(self, method: str, params: dict[str, Any],
                      wait_secs: float | None = None) -> Any:
        """Send a request with our next id and wait for its result.

        Raises :class:`JsonRpcError` for an error answer, ``TimeoutError`` when
        none came within ``wait_secs`` (None: wait as long as it takes), and the
        error :meth:`close_outbound` was given (default :class:`PeerClosed`)
        once nobody can answer. A request given up on (timeout, or the caller
        cancelled) is withdrawn with the ``withdraw_method`` notification, if any.
        """
        req_id, future = self.pending.open()
        sent = False
        try:
            sent = await self._write(request_line(req_id, method, params))
            if wait_secs is None:
                return await future
            return await asyncio.wait_for(future, wait_secs)
        except (TimeoutError, asyncio.CancelledError):
            if sent and self._withdraw_method is not None and not self.pending.closed:
                self._withdraw(req_id)
            raise
        finally:
            self.pending.discard(req_id)

    def _withdraw(self, req_id: JsonRpcId) -> None:
        """Send the withdrawal of our request ``req_id`` — from a task of its own (never
        blocking the caller, who may be being cancelled), one for all the withdrawals
        pending: a burst of them waits at the transport as one send at a time, never as
        one send each, which a transport bounding what waits (the WebSocket outbox) would
        hold against a client that reads."""
        self._withdrawals.append(req_id)
        if self._withdrawing is None or self._withdrawing.done():
            self._withdrawing = self._start(self._send_withdrawals())

    async def _send_withdrawals(self) -> None:
        assert self._withdraw_method is not None
        while self._withdrawals:
            await self.notify(self._withdraw_method, {"requestId": self._withdrawals.popleft()})

    def close_outbound(self, error: Callable[[], BaseException]) -> None:
        """Nobody can answer our requests any more: fail the open ones, refuse new ones."""
        self.pending.close(error)

    # ------------------------------------------------------------------ end

    @property
    def running(self) -> int:
        """Handlers (and error answers) still running."""
        return len(self._tasks)

    async def drain(self, wait_secs: float, abort: asyncio.Event | None = None) -> None:
        """Wait until the running handlers have answered, at most ``wait_secs`` or until ``abort``."""
        tasks = list(self._tasks)
        if not tasks:
            return
        waiting = asyncio.ensure_future(asyncio.wait(tasks, timeout=wait_secs))
        watchers: set[asyncio.Future[Any]] = {waiting}
        if abort is not None:
            watchers.add(asyncio.ensure_future(abort.wait()))
        await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
        for watcher in watchers:
            watcher.cancel()

    def abort(self) -> list[asyncio.Task[None]]:
        """Cancel the running handlers now (their requests answer ``Request cancelled``);
        returns the cancelled tasks."""
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        return tasks

    async def cancel(self, wait_secs: float = 5.0) -> None:
        """:meth:`abort`, then wait (at most ``wait_secs``) for the handlers to finish."""
        tasks = self.abort()
        if tasks:
            await asyncio.wait(tasks, timeout=wait_secs)
