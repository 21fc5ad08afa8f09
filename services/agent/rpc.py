"""A JSON-RPC 2.0 peer over newline-delimited streams (SPEC §1).

Both directions at once: inbound requests are handled concurrently (one task
each, so a ``session/cancel`` is served while a prompt streams); outbound
requests carry this peer's own integer ids and are matched to their responses
by id. Bad input gets a clear error and never stops the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

from services.common.logs import get_logger
from services.common.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    JSONRPC_VERSION,
    MSG_INVALID_VERSION,
    MSG_PARSE_ERROR,
    PARSE_ERROR,
)

log = get_logger("agent.rpc")

#: Longest accepted line; prompts never carry blobs (the edge materializes them).
MAX_LINE_BYTES = 64 * 1024 * 1024

WriteLine = Callable[[bytes], Awaitable[None]]


class RpcError(Exception):
    """An error answer: ``code`` and ``message`` go on the wire as they are."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PeerClosed(ConnectionError):
    """The other side went away before answering."""


class Handler(Protocol):
    """Serves inbound calls; raise :class:`RpcError` for an error answer."""

    async def __call__(self, method: str, params: dict[str, Any], notification: bool) -> Any:
        """Handle one request (``notification`` = no answer expected)."""
        ...


class JsonRpcPeer:
    """One JSON-RPC connection: reads lines from ``reader``, writes via ``write_line``."""

    def __init__(self, reader: asyncio.StreamReader, write_line: WriteLine,
                 handler: Handler) -> None:
        self._reader = reader
        self._write_line = write_line
        self._handler = handler
        self._write_lock = asyncio.Lock()
        self._ids = itertools.count()
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._write_failed = False

    # ------------------------------------------------------------------ output

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as one line (orjson never emits raw newlines).

        Writing continues after input EOF: a client that closed its side may
        still read the answers to what it sent.
        """
        if self._write_failed:
            return
        data = orjson.dumps(message) + b"\n"
        async with self._write_lock:
            try:
                await self._write_line(data)
            except (ConnectionError, BrokenPipeError, RuntimeError) as exc:
                log.warning("rpc_write_failed", error=type(exc).__name__)
                self._write_failed = True
                self._fail_pending("the client stopped reading")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification."""
        await self.send({"jsonrpc": JSONRPC_VERSION, "method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Send a request with our own id and wait for its result.

        Raises :class:`RpcError` for an error answer, ``TimeoutError`` when no
        answer came in ``wait_secs`` seconds, :class:`PeerClosed` when the peer left.
        """
        if self._closed or self._write_failed:
            raise PeerClosed("the client is gone")
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[str(request_id)] = future
        try:
            await self.send({"jsonrpc": JSONRPC_VERSION, "id": request_id, "method": method,
                             "params": params})
            return await asyncio.wait_for(future, wait_secs)
        finally:
            self._pending.pop(str(request_id), None)

    # ------------------------------------------------------------------ input

    async def run(self) -> None:
        """Read until EOF; returns when the input ends (pending requests then fail)."""
        try:
            while True:
                try:
                    line = await self._reader.readline()
                except ValueError:  # line longer than the stream limit
                    await self._error(None, PARSE_ERROR,
                                      MSG_PARSE_ERROR.format(detail="line too long"))
                    continue
                if not line:
                    break
                if line.strip():
                    await self._dispatch(line)
        finally:
            self._closed = True
            self._fail_pending("the client closed the connection")

    def _fail_pending(self, reason: str) -> None:
        """Outbound requests can no longer be answered: fail them now, not at their timeout."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(PeerClosed(reason))

    async def drain(self, wait_secs: float) -> None:
        """Wait (bounded) for the running handlers to answer, e.g. after input EOF."""
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=wait_secs)

    async def close(self) -> None:
        """Cancel every running handler and wait for them."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _error(self, request_id: Any, code: int, message: str) -> None:
        await self.send({"jsonrpc": JSONRPC_VERSION,
                         "error": {"code": code, "message": message}, "id": request_id})

    async def _dispatch(self, line: bytes) -> None:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            await self._error(None, PARSE_ERROR, MSG_PARSE_ERROR.format(detail=str(exc)))
            return
        if not isinstance(msg, dict):
            kind = "batch requests are not supported" if isinstance(msg, list) else "not an object"
            await self._error(None, PARSE_ERROR, MSG_PARSE_ERROR.format(detail=kind))
            return
        request_id = msg.get("id")
        if "method" not in msg and request_id is not None and ("result" in msg or "error" in msg):
            self._route_response(msg)
            return
        if msg.get("jsonrpc") != JSONRPC_VERSION:
            if request_id is not None:
                await self._error(request_id, INVALID_REQUEST, MSG_INVALID_VERSION)
            return
        method = msg.get("method")
        if not isinstance(method, str) or not method:
            await self._error(None, PARSE_ERROR, MSG_PARSE_ERROR.format(detail="missing method"))
            return
        params = msg.get("params")
        if not isinstance(params, dict):
            params = {}
        task = asyncio.create_task(self._serve(request_id, method, params))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _route_response(self, msg: dict[str, Any]) -> None:
        future = self._pending.get(str(msg["id"]))
        if future is None or future.done():
            return  # unknown or late: dropped silently (SPEC §1)
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            future.set_exception(RpcError(int(err.get("code", INTERNAL_ERROR)),
                                          str(err.get("message", "error"))))
        else:
            future.set_result(msg.get("result"))

    async def _serve(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        notification = request_id is None
        try:
            result = await self._handler(method, params, notification)
        except RpcError as exc:
            if not notification:
                await self._error(request_id, exc.code, exc.message)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("rpc_handler_failed", method=method)
            if not notification:
                await self._error(request_id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}")
            return
        if not notification:
            await self.send({"jsonrpc": JSONRPC_VERSION, "id": request_id,
                             "result": result if result is not None else {}})
