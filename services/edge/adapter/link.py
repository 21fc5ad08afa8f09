"""JSON-RPC over one adapter's stdio, reached through the lifecycle ``Attach`` stream.

The edge is the ACP *client* of each adapter. This module is the transport of
a :class:`~services.common.jsonrpc.JsonRpcPeer` configured for that side:
requests with integer ids, runs of notifications handed to the adapter's
owner in arrival order (so per-session update order is preserved, and a burst
is relayed as one batch), adapter-originated requests handled concurrently (a
permission request waiting for the user never blocks the update stream), and
bad lines from the adapter logged, never answered. At most ``MAX_RUNNING_AGENT_REQUESTS``
of its requests are served at once: past it no further line is read from the adapter
until one is answered (the session tools that run a turn, whose end may come over this
very pipe, run beside that bound, at most ``MAX_RUNNING_TURN_CALLS`` of them). Outgoing lines are batched:
each ``Lines`` message carries whatever is queued at that moment.

A link opens the stream either on a lease it already has, or with the
``EnsureSession`` request of a session coming up (``AttachOpen.ensure``): the
lifecycle service then takes a warm adapter or spawns one and attaches in the
same round trip, and :attr:`AdapterLink.ensured` says what it did. A link may
be opened before it knows whom it serves (:meth:`AdapterLink.bind`): the edge
takes a warm adapter while the session service decides the session.

Where the lifecycle service shares this host (its backend carries an fd dialer,
:mod:`services.edge.backends.fds`), the stream is opened with ``fd_pass`` and the
link takes the adapter's pipes and reads and writes them itself
(:mod:`services.edge.adapter.pipes`): updates go adapter → edge, and the stream
carries only the open, the ensure and the exit report. Everything else is the
same either way: the lines written before the link attached go first, the
adapter's lines come in order and before its exit, an over-long line gives the
adapter up. A stream broken by a lifecycle service restart is opened again
(:mod:`services.edge.adapter.reattach`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from services.common.acp.v2.names import PROTOCOL_AUTO, PROTOCOL_V2
from services.common.jsonrpc import (
    JsonRpcError,
    JsonRpcId,
    JsonRpcPeer,
    integer_ids,
    notification_line,
    result_line,
)
from services.common.logs import get_logger
from services.common.protocol import (
    MAX_RUNNING_AGENT_REQUESTS,
    MAX_RUNNING_TURN_CALLS,
    MSG_TOO_MANY_TURN_CALLS,
    SESSION_BUSY,
    TURN_RUNNING_METHODS,
)
from services.edge.adapter.agent_meta import screen_batch, screen_params, screened_request
from services.edge.adapter.exits import AdapterExit, AdapterGone, seen
from services.edge.adapter.pipes import AdapterPipes
from services.edge.adapter.reattach import reattach
from services.edge.adapter.v2_agent import V2Agent
from services.edge.backends.errors import ServiceError
from services.edge.backends.fds import PipesLost, PipesNotTaken
from services.edge.backends.lifecycle import (
    AdapterExited,
    Attached,
    AttachSpec,
    AttachStream,
    Control,
    Ensured,
    LifecycleBackend,
    LinesDropped,
    StdoutLines,
)

log = get_logger("edge.adapter")

_CLOSE = object()

#: The JSON-RPC peer's handling of a run of lines (``JsonRpcPeer.feed_batch``).
LineFeed = Callable[[list[str]], Awaitable[None]]


class AdapterPeer(Protocol):
    """What the link calls back into (the edge session owning this adapter)."""

    async def on_adapter_notifications(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        """Consecutive notifications ``(method, params)`` from the adapter, in stream order.

        One call per run of notifications in one ``Lines`` message, so a burst of
        updates is relayed as a batch; a request or response in between splits it.
        """

    async def on_adapter_request(self, method: str, params: dict[str, Any]) -> Any:
        """An adapter→client request; return the result or raise JsonRpcError."""

    def on_adapter_exit(self, exit_info: AdapterExit) -> None:
        """The adapter's stream ended."""

    async def on_adapter_lines(self, lines: Sequence[str], feed: LineFeed) -> None:
        """The lines of one ``Lines`` message, in order: what the peer does not relay
        itself goes to ``feed`` (the JSON-RPC peer), in stream order."""


class AdapterLink:
    """A JSON-RPC client over one lease's ``Attach`` stream."""

    def __init__(
        self,
        lifecycle: LifecycleBackend,
        attach: AttachSpec,
        *, foreign: bool = True, protocol: int = 1, first_id: int = 0,
    ) -> None:
        """``first_id``: its first request id (a re-adopted adapter's is above its last's)."""
        self._lifecycle = lifecycle
        #: An external agent's: acpgate's ``_meta`` namespace is taken out of what it sends
        #: (:mod:`services.edge.adapter.agent_meta`); False for the built-in agent only.
        self.foreign = foreign
        #: An agent that may speak v2 (``protocol`` auto or 2): :mod:`.v2_agent`.
        self.v2 = V2Agent(protocol) if protocol in (PROTOCOL_AUTO, PROTOCOL_V2) else None
        self._open = attach
        #: The lease attached to ("" until the lifecycle service ensured one).
        self.lease_id = attach.lease_id
        #: What the lifecycle service did for a link opened with ``ensure`` (once attached).
        self.ensured: Ensured | None = None
        self._label = attach.label
        self._peer: AdapterPeer | None = None
        self._bound = asyncio.Event()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._rpc = JsonRpcPeer(self._send, self._serve, next_id=integer_ids(first_id),
                                notifications=self._notifications,
                                answer_unidentified=False, label=f"adapter:{self._label}",
                                max_running=MAX_RUNNING_AGENT_REQUESTS,
                                uncounted=TURN_RUNNING_METHODS)
        #: Requests of :data:`TURN_RUNNING_METHODS` being served (capped on their own).
        self._turn_calls = 0
        self._call: AttachStream | None = None
        self._reader: asyncio.Task[None] | None = None
        self.exit_info: AdapterExit | None = None
        #: True when the edge itself let the adapter go (:meth:`abort`) rather than the
        #: adapter exiting or its stream breaking.
        self.let_go = False
        self._ended = asyncio.Event()
        self._attached: asyncio.Future[None] | None = None
        #: This edge can take the pipes at the lifecycle service's fd socket.
        self._takes_pipes = lifecycle.fds is not None
        #: How lines travel, once settled: True through the pipes, False over the stream.
        self._via: asyncio.Future[bool] | None = None
        #: The lifecycle service offered the pipes and they were not taken.
        self._declined = False
        self._pipes: AdapterPipes | None = None
        self._pipe_reader: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def on_unmatched(self, handler: Callable[[dict[str, Any]], None]) -> None:
        """Give ``handler`` every answer to an id this link never asked: what the adapter
        answers a dead predecessor's request (a turn's ``session/prompt``)."""
        self._rpc.unmatched = handler

    def bind(self, peer: AdapterPeer) -> None:
        """Serve ``peer`` (the adapter's lines wait for it; bind before any request)."""
        self._peer = peer
        self._bound.set()

    @property
    def begun(self) -> bool:
        """True once :meth:`begin` opened the stream."""
        return self._call is not None

    def begin(self) -> None:
        """Start attaching to the lease without waiting: lines written from now on follow
        the stream's ``open`` and reach the adapter once the lifecycle service attached."""
        loop = asyncio.get_running_loop()
        self._attached = loop.create_future()
        # A failed attach that nobody waits for any more (its setup was cancelled) is
        # nobody's error: seen here, raised to whoever still waits.
        self._attached.add_done_callback(seen)
        self._via = loop.create_future()
        opening = self._open
        if self._takes_pipes:
            opening = dataclasses.replace(self._open, fd_pass=True)
        else:
            self._via.set_result(False)
        self._call = self._lifecycle.attach(opening, self._requests())
        self._reader = asyncio.create_task(self._read_loop(), name=f"attach-{self._label}")

    async def attached(self, wait_secs: float = 30.0) -> None:
        """Wait for the ``attached`` confirmation of :meth:`begin` (the link is aborted when
        it fails or does not come in time)."""
        assert self._attached is not None, "begin() first"
        try:
            await asyncio.wait_for(asyncio.shield(self._attached), wait_secs)
        except BaseException:
            self.abort()
            raise

    async def _requests(self) -> AsyncIterator[list[str] | Control]:
        """What the stream sends after its open: stdin batches, then the close."""
        assert self._via is not None
        if await self._via:  # the lines go into the pipes: only the close comes here
            while await self._queue.get() is not _CLOSE:
                pass
            yield Control.CLOSE_STDIN
            return
        if self._declined:
            yield Control.USE_STREAM
        while True:
            first = await self._queue.get()
            if first is _CLOSE:
                yield Control.CLOSE_STDIN
                return
            batch = [first]
            closing = False
            while not self._queue.empty():  # drain what is ready; never wait to fill
                nxt = self._queue.get_nowait()
                if nxt is _CLOSE:
                    closing = True
                    break
                batch.append(nxt)
            yield batch
            if closing:
                yield Control.CLOSE_STDIN
                return

    async def _read_loop(self) -> None:
        exit_info = AdapterExit(lost=True)
        try:
            while True:
                try:
                    exit_info = await self._read_call(exit_info)
                    break
                except ServiceError as exc:
                    attached = self._attached is not None and self._attached.done()
                    call = await reattach(self.lease_id, exc, self._reopen) if attached else None
                    if call is None:
                        raise
                    self._call = call
        except ServiceError as exc:
            if self._attached is not None and not self._attached.done():
                # A refused ensure is EnsureSession's refusal, as the caller would have had it.
                self._attached.set_exception(
                    exc if self._open.ensure is not None
                    else ConnectionError(f"attach failed: {exc.code}: {exc.detail}"))
            log.info("attach_stream_ended", lease_id=self._label, code=exc.code)
        except PipesLost as exc:
            log.warning("adapter_pipes_lost", lease_id=self._label, why=str(exc))
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("attach_reader_failed", lease_id=self._label)
        finally:
            self._finish(exit_info)

    def _reopen(self) -> AttachStream:
        """A new ``Attach`` stream on the lease (after the lifecycle service restarted): only
        the exit when this link holds the pipes, else the relay as before."""
        assert self._via is not None and self._via.done()
        opening = AttachSpec(lease_id=self.lease_id, resume_pipes=self._via.result())
        return self._lifecycle.attach(opening, self._requests())

    async def _read_call(self, exit_info: AdapterExit) -> AdapterExit:
        """Read the current stream to its end: how the adapter went, ``exit_info`` if unsaid."""
        call = self._call
        assert call is not None
        while (event := await call.read()) is not None:
            if isinstance(event, StdoutLines):
                if self._peer is None:
                    await self._bound.wait()
                assert self._peer is not None
                await self._peer.on_adapter_lines(event.lines, self._rpc.feed_batch)
            elif isinstance(event, Attached):
                if event.ensured is not None:
                    self.ensured = event.ensured
                    self.lease_id = self._label = event.lease.lease_id
                await self._settle_via(event)
                if self._attached is not None and not self._attached.done():
                    self._attached.set_result(None)
            elif isinstance(event, AdapterExited):
                exit_info = AdapterExit(exit_code=event.exit_code, signal=event.signal,
                                        stderr_tail=event.stderr_tail)
                if self._pipes is not None and self._pipe_reader is not None:
                    self._pipes.exit_known()  # its last lines come before the exit
                    await self._pipe_reader
                break
            elif isinstance(event, LinesDropped):
                # Framing is broken: what the dropped line meant (an answer?) is lost, so
                # every pending request fails saying why, and the adapter is given up.
                log.warning("adapter_line_too_long", lease_id=self._label,
                            count=event.count, limit=event.limit)
                exit_info = AdapterExit(line_limit=event.limit)
                call.cancel()
                break
        return exit_info

    async def _settle_via(self, first: Attached) -> None:
        """Take the pipes the first response grants (lines queued meanwhile go into them
        first, in order), or relay over the stream: when none were offered, or taking
        them did not happen (:class:`PipesNotTaken`). :class:`PipesLost` when the pipes
        may have left the lifecycle service but did not arrive: the link is lost."""
        via = self._via
        if via is None or via.done():
            return
        if not self._takes_pipes or first.grant is None:
            via.set_result(False)
            return
        try:
            taken = await self._lifecycle.take_pipes(self.lease_id, first.grant)
        except PipesNotTaken as exc:
            log.info("adapter_pipes_not_taken", lease_id=self._label, why=str(exc))
            self._declined = True
            via.set_result(False)
            return
        pipes = AdapterPipes(taken, self._stdout_lines)
        try:
            await pipes.open()
        except OSError as exc:
            raise PipesLost(f"{type(exc).__name__}: {exc}") from None
        self._pipes = pipes
        closing = False
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is _CLOSE:
                closing = True
                break
            pipes.write(item)
        if closing:
            pipes.close_stdin()
            self._queue.put_nowait(_CLOSE)
        via.set_result(True)
        self._pipe_reader = asyncio.create_task(self._read_pipes(pipes),
                                                name=f"pipes-{self._label}")

    async def _stdout_lines(self, lines: list[str]) -> None:
        """One read's lines from the pipe, to the peer (once bound)."""
        if self._peer is None:
            await self._bound.wait()
        assert self._peer is not None
        await self._peer.on_adapter_lines(lines, self._rpc.feed_batch)

    async def _read_pipes(self, pipes: AdapterPipes) -> None:
        """Relay stdout until it ends; an over-long line, or a failed relay, ends the link."""
        try:
            end = await pipes.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("adapter_pipe_reader_failed", lease_id=self._label)
            self._finish(AdapterExit(lost=True))
            self._cancel_call()
            return
        if end.too_long:
            # Framing is broken: as for the stream's too_long (see _read_loop).
            log.warning("adapter_line_too_long", lease_id=self._label, limit=end.too_long)
            self._finish(AdapterExit(line_limit=end.too_long))
            self._cancel_call()

    def _cancel_call(self) -> None:
        if self._call is not None:
            self._call.cancel()

    def _finish(self, exit_info: AdapterExit, *, let_go: bool = False) -> None:
        if self.exit_info is not None:
            return
        self.exit_info = exit_info
        self.let_go = let_go
        self._ended.set()
        if self._via is not None and not self._via.done():
            self._via.set_result(False)
        if self._pipes is not None:
            self._pipes.close()
        reader = self._pipe_reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            reader.cancel()
        if self._attached is not None and not self._attached.done():
            self._attached.set_exception(AdapterGone(exit_info))
        self._rpc.close_outbound(lambda: AdapterGone(exit_info))
        if self.v2 is not None:
            self.v2.gone(AdapterGone(exit_info))
        if self._peer is not None:
            with contextlib.suppress(Exception):
                self._peer.on_adapter_exit(exit_info)

    async def close(self) -> None:
        """Close the adapter's stdin and stop reading (the lifecycle service reaps)."""
        self._queue.put_nowait(_CLOSE)
        if self._pipes is not None:
            self._pipes.close_stdin()
        self.abort()

    def abort(self) -> None:
        """Stop reading at once and fail whatever is pending."""
        self._cancel_call()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
        self._rpc.abort()
        self._finish(AdapterExit(lost=True), let_go=True)

    async def exited(self, wait_secs: float) -> AdapterExit | None:
        """How the adapter went, when it did by itself (it exited, or its stream broke) —
        already, or within ``wait_secs``; None while it lives on, or when the edge let it
        go (:meth:`abort`)."""
        if not self._ended.is_set() and wait_secs > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ended.wait(), wait_secs)
        return self.exit_info if self._ended.is_set() and not self.let_go else None

    # ------------------------------------------------------------------ outbound

    def _write(self, line: str) -> None:
        if self._pipes is not None:
            self._pipes.write(line)
        else:
            self._queue.put_nowait(line)

    async def _send(self, line: str) -> None:
        self._write(line)

    async def request(self, method: str, params: dict[str, Any],
                      wait_secs: float | None = None) -> Any:
        """Send a request and wait for the adapter's result.

        Raises :class:`JsonRpcError` when the adapter answers with an error
        (``data`` kept), :class:`AdapterGone` when it exits first.
        """
        if self.v2 is not None:
            return await self.v2.request(self._request, method, params, wait_secs)
        return await self._request(method, params, wait_secs)

    @property
    def speaks_v2(self) -> bool:
        """True once the agent answered ``initialize`` with v2."""
        return self.v2 is not None and self.v2.active

    async def _request(self, method: str, params: dict[str, Any],
                       wait_secs: float | None) -> Any:
        if self.foreign:
            return await screened_request(self._rpc, method, params, wait_secs)
        return await self._rpc.request(method, params, wait_secs)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification (fire and forget)."""
        if self.exit_info is None:
            if self.v2 is not None:
                method, params = self.v2.notification(method, params)
            self._write(notification_line(method, params))

    def answer(self, request_id: JsonRpcId, result: Any) -> None:
        """Answer the adapter's request ``request_id`` with ``result``: one a predecessor
        link read and never answered (a re-adopted adapter's open question)."""
        if self.exit_info is None:
            self._write(result_line(request_id, result))

    async def _notifications(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        assert self._peer is not None  # lines reach the JSON-RPC peer only once bound
        batch = screen_batch(batch) if self.foreign else batch
        if self.v2 is not None and self.v2.active:
            await self.v2.notifications(batch, self._peer.on_adapter_notifications)
        else:
            await self._peer.on_adapter_notifications(batch)

    async def _serve(self, method: str, params: dict[str, Any], notification: bool) -> Any:
        # Notifications go to the peer's notification sink; only requests get here.
        assert self._peer is not None
        params = screen_params(params) if self.foreign else params
        if self.v2 is not None:
            params = self.v2.agent_request(method, params)
        if method not in TURN_RUNNING_METHODS:
            return await self._peer.on_adapter_request(method, params)
        if self._turn_calls >= MAX_RUNNING_TURN_CALLS:
            raise JsonRpcError(SESSION_BUSY, MSG_TOO_MANY_TURN_CALLS.format(
                max=MAX_RUNNING_TURN_CALLS))
        self._turn_calls += 1
        try:
            return await self._peer.on_adapter_request(method, params)
        finally:
            self._turn_calls -= 1

    def cancel_inbound(self, request_id: Any) -> None:
        """The adapter withdrew its request ``request_id`` (``$/cancel_request``): stop
        answering it (a relayed question is withdrawn from the client too); the adapter
        gets -32800. An unknown or finished id is ignored."""
        self._rpc.withdraw(request_id)

