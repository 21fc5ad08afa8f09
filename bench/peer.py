"""The benchmark's ACP client: one JSON-RPC peer over any line transport.

The same :class:`Peer` reads the firehose adapter directly, ``acpgate acp``
over stdio and the gateway over WebSocket, so the three paths differ only in
what sits between the client and the adapter. Every ``session/update`` is
stamped with ``time.monotonic_ns()`` on arrival and credited to a
:class:`StreamSink` by session id.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from services.common.protocol import M_SESSION_PROMPT, M_SESSION_UPDATE

SendFn = Callable[[str], Awaitable[None]]


class RpcError(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, error: Any) -> None:
        super().__init__(f"{error}")
        self.error = error


@dataclass
class StreamSink:
    """What arrived for one session: chunk count, arrival times and relay latencies."""

    #: Record ``recv - sent`` of every chunk (ns); off for pure throughput runs.
    keep_latency: bool = False
    chunks: int = 0
    first_ns: int = 0
    last_ns: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    #: Set when ``chunks`` reaches ``expect`` (0 = never).
    expect: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set by an idle ``state_update`` (a v2 connection: the turn ended).
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    #: The ``messageId`` of every chunk, when counted (None: not, the throughput runs').
    messages: set[str] | None = None

    def reset(self, expect: int, keep_latency: bool = False) -> None:
        """Start a new measurement."""
        self.chunks = 0
        self.first_ns = self.last_ns = 0
        self.latencies_ns = []
        self.expect = expect
        self.keep_latency = keep_latency
        self.done = asyncio.Event()
        self.idle = asyncio.Event()

    def add(self, now_ns: int, update: Any) -> None:
        """Credit one update that arrived at ``now_ns``."""
        if not isinstance(update, dict) or update.get("sessionUpdate") != "agent_message_chunk":
            if isinstance(update, dict) and update.get("state") == "idle":
                self.idle.set()
            return
        if not self.chunks:
            self.first_ns = now_ns
        self.last_ns = now_ns
        self.chunks += 1
        if self.messages is not None:
            self.messages.add(str(update.get("messageId", "")))
        if self.keep_latency:
            text = update.get("content", {}).get("text", "")
            _, _, stamp = text.partition(":")
            with contextlib.suppress(ValueError):
                self.latencies_ns.append(now_ns - int(stamp))
        if self.expect and self.chunks >= self.expect:
            self.done.set()


class Peer:
    """A JSON-RPC client over ``send`` and an iterator of incoming lines."""

    def __init__(self, send: SendFn, lines: AsyncIterator[str | bytes]) -> None:
        self._send = send
        self._lines = lines
        self._next_id = 0
        #: The ACP version ``initialize`` chose (2: the prompt answers at once, the turn ends
        #: with an idle ``state_update``).
        self.version = 1
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.sinks: dict[str, StreamSink] = {}
        #: Updates for sessions without a sink (e.g. a session/load replay before the sink).
        self.stray_updates = 0
        self.closed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    def sink(self, session_id: str) -> StreamSink:
        """The sink of ``session_id`` (created on first use)."""
        found = self.sinks.get(session_id)
        if found is None:
            found = self.sinks[session_id] = StreamSink()
        return found

    async def _read(self) -> None:
        try:
            async for line in self._lines:
                now = time.monotonic_ns()
                try:
                    msg = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(msg, dict):
                    continue
                method = msg.get("method")
                if method == M_SESSION_UPDATE and "id" not in msg:
                    params = msg.get("params") or {}
                    target = self.sinks.get(params.get("sessionId", ""))
                    if target is None:
                        self.stray_updates += 1
                    else:
                        target.add(now, params.get("update"))
                elif method is not None and "id" in msg:
                    # Nothing the benchmark does asks for permission: decline politely.
                    await self._send(orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {
                        "code": -32601, "message": "not supported by the bench client"}}).decode())
                elif "id" in msg:
                    fut = self._pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
        finally:
            self.closed.set()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))
            self._pending.clear()

    async def request(self, method: str, params: dict[str, Any], wait_secs: float = 120.0) -> Any:
        """Send a request and return its result (RpcError on an error answer)."""
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        await self._send(orjson.dumps(
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).decode())
        msg = await asyncio.wait_for(fut, wait_secs)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg.get("result")

    async def prompt(self, session_id: str, text: str, wait_secs: float = 300.0) -> Any:
        """``session/prompt`` with one text block (accepted by acpgate and by the adapter)."""
        return await self.request(M_SESSION_PROMPT, {
            "sessionId": session_id, "prompt": [{"type": "text", "text": text}]}, wait_secs)

    async def aclose(self) -> None:
        """Stop reading (the transport is closed by its owner)."""
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
