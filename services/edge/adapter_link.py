"""JSON-RPC over one adapter's stdio, reached through the lifecycle ``Attach`` stream.

The edge is the ACP *client* of each adapter. This module only moves lines:
requests with integer ids and their pending futures, notifications handed to
the peer in arrival order (so per-session update order is preserved), and
adapter-originated requests handled concurrently (a permission request waiting
for the user never blocks the update stream). Outgoing lines are batched: each
``Lines`` message carries whatever is queued at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import orjson

from acpgate.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.logs import get_logger
from services.common.protocol import INTERNAL_ERROR, METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND
from services.edge.framing import (
    JsonRpcError,
    error_line,
    notification_line,
    request_line,
    result_line,
)

log = get_logger("edge.adapter")

_CLOSE = object()


@dataclass(frozen=True)
class AdapterExit:
    """How an adapter's stream ended."""

    exit_code: int = -1
    signal: int = 0
    #: True when the lifecycle stream broke without an exit report.
    lost: bool = False

    def describe(self) -> str:
        """A short cause for error messages (never stderr contents: they may hold secrets)."""
        if self.lost:
            return "agent process connection lost"
        if self.signal:
            return f"agent process exited (killed by signal {self.signal})"
        return f"agent process exited (exit code {self.exit_code})"


class AdapterGone(Exception):
    """The adapter exited (or its stream broke) before answering."""

    def __init__(self, exit_info: AdapterExit) -> None:
        super().__init__(exit_info.describe())
        self.exit_info = exit_info


class AdapterRpcError(Exception):
    """The adapter answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


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


class AdapterLink:
    """A JSON-RPC client over one lease's ``Attach`` stream."""

    def __init__(
        self,
        stub: lifecycle_pb2_grpc.LifecycleServiceStub,
        lease_id: str,
        peer: AdapterPeer,
    ) -> None:
        self._stub = stub
        self._lease_id = lease_id
        self._peer = peer
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.exit_info: AdapterExit | None = None
        self._attached: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def open(self, wait_secs: float = 30.0) -> None:
        """Attach to the lease and wait for the ``attached`` confirmation."""
        loop = asyncio.get_running_loop()
        self._attached = loop.create_future()
        self._call = self._stub.Attach(self._requests())  # type: ignore[arg-type]
        self._reader = asyncio.create_task(self._read_loop(), name=f"attach-{self._lease_id}")
        try:
            await asyncio.wait_for(asyncio.shield(self._attached), wait_secs)
        except BaseException:
            self.abort()
            raise

    async def _requests(self) -> AsyncIterator[lifecycle_pb2.AttachRequest]:
        yield lifecycle_pb2.AttachRequest(open=lifecycle_pb2.AttachOpen(lease_id=self._lease_id))
        while True:
            first = await self._queue.get()
            if first is _CLOSE:
                yield lifecycle_pb2.AttachRequest(close_stdin=True)
                return
            batch = [first]
            closing = False
            while not self._queue.empty():  # drain what is ready; never wait to fill
                nxt = self._queue.get_nowait()
                if nxt is _CLOSE:
                    closing = True
                    break
                batch.append(nxt)
            yield lifecycle_pb2.AttachRequest(stdin=lifecycle_pb2.Lines(lines=batch))
            if closing:
                yield lifecycle_pb2.AttachRequest(close_stdin=True)
                return

    async def _read_loop(self) -> None:
        exit_info = AdapterExit(lost=True)
        try:
            async for resp in self._call:
                which = resp.WhichOneof("msg")
                if which == "attached":
                    if self._attached is not None and not self._attached.done():
                        self._attached.set_result(None)
                elif which == "stdout":
                    await self._on_lines(resp.stdout.lines)
                elif which == "exit":
                    exit_info = AdapterExit(exit_code=resp.exit.exit_code, signal=resp.exit.signal)
                    break
        except grpc.aio.AioRpcError as exc:
            if self._attached is not None and not self._attached.done():
                self._attached.set_exception(
                    ConnectionError(f"attach failed: {exc.code().name}: {exc.details()}"))
            log.info("attach_stream_ended", lease_id=self._lease_id, code=exc.code().name)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("attach_reader_failed", lease_id=self._lease_id)
        finally:
            self._finish(exit_info)

    def _finish(self, exit_info: AdapterExit) -> None:
        if self.exit_info is not None:
            return
        self.exit_info = exit_info
        if self._attached is not None and not self._attached.done():
            self._attached.set_exception(AdapterGone(exit_info))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(AdapterGone(exit_info))
        self._pending.clear()
        with contextlib.suppress(Exception):
            self._peer.on_adapter_exit(exit_info)

    async def close(self) -> None:
        """Close the adapter's stdin and stop reading (the lifecycle service reaps)."""
        self._queue.put_nowait(_CLOSE)
        self.abort()

    def abort(self) -> None:
        """Stop reading at once and fail whatever is pending."""
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
        for task in list(self._tasks):
            task.cancel()
        self._finish(AdapterExit(lost=True))

    # ------------------------------------------------------------------ outbound

    def _write(self, line: str) -> None:
        self._queue.put_nowait(line)

    async def request(self, method: str, params: dict[str, Any],
                      wait_secs: float | None = None) -> Any:
        """Send a request and wait for the adapter's result."""
        if self.exit_info is not None:
            raise AdapterGone(self.exit_info)
        req_id = self._next_id
        self._next_id += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        self._write(request_line(req_id, method, params))
        try:
            if wait_secs is None:
                return await fut
            return await asyncio.wait_for(fut, wait_secs)
        finally:
            self._pending.pop(req_id, None)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification (fire and forget)."""
        if self.exit_info is None:
            self._write(notification_line(method, params))

    # ------------------------------------------------------------------ inbound

    async def _on_lines(self, lines: Iterable[str]) -> None:
        """Handle one ``Lines`` message: notifications in runs, everything else one by one."""
        notes: list[tuple[str, dict[str, Any]]] = []
        for line in lines:
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                log.warning("adapter_wrote_non_json", lease_id=self._lease_id, length=len(line))
                continue
            if not isinstance(msg, dict):
                continue
            method = msg.get("method")
            if isinstance(method, str) and msg.get("id") is None:
                raw = msg.get("params")
                notes.append((method, raw if isinstance(raw, dict) else {}))
                continue
            if notes:  # what came before is delivered before this request/response
                await self._notify_peer(notes)
                notes = []
            self._on_message(msg)
        if notes:
            await self._notify_peer(notes)

    async def _notify_peer(self, notes: list[tuple[str, dict[str, Any]]]) -> None:
        try:
            await self._peer.on_adapter_notifications(notes)
        except Exception:
            log.exception("adapter_notification_failed", method=notes[0][0], count=len(notes))

    def _on_message(self, msg: dict[str, Any]) -> None:
        """An adapter request (answered in its own task) or a response to one of ours."""
        method = msg.get("method")
        msg_id = msg.get("id")
        if isinstance(method, str):
            raw = msg.get("params")
            params: dict[str, Any] = raw if isinstance(raw, dict) else {}
            task = asyncio.create_task(self._answer(msg_id, method, params))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        if not isinstance(msg_id, int):
            return
        fut = self._pending.get(msg_id)
        if fut is None or fut.done():
            return
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            raw_code = err.get("code")
            code = raw_code if isinstance(raw_code, int) else INTERNAL_ERROR
            fut.set_exception(AdapterRpcError(code, str(err.get("message") or "adapter error"),
                                              err.get("data")))
        else:
            fut.set_result(msg.get("result"))

    async def _answer(self, msg_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            result = await self._peer.on_adapter_request(method, params)
        except JsonRpcError as exc:
            self._write(error_line(msg_id, exc.code, exc.message))
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("adapter_request_failed", method=method)
            self._write(error_line(msg_id, INTERNAL_ERROR, "Internal error"))
            return
        self._write(result_line(msg_id, result))


def method_not_found(method: str) -> JsonRpcError:
    """The -32601 answer to an adapter→client method we do not serve."""
    return JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))
