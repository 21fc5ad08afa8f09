"""One Streamable HTTP client connection: the dialect's transport, fed by POSTs, read by GETs.

To the dialect (``serve_connection``) it is what a WebSocket is: ``frames()``
yields the client's messages, ``send``/``send_many`` take the answers. Between
them sit the RFD's routing (:mod:`.routing`), the streams (:mod:`.streams`) and
the bounds of today's WebSocket:

- POSTed messages wait in a small inbox until the dialect reads them (it reads at
  most ``MAX_IN_FLIGHT`` requests ahead), so a POST returns 202 only once its
  message was taken: a client that floods requests is slowed, not buffered;
- what the dialect sends is charged to the connection's :class:`~.streams.Budget`
  until a reader writes it; a client that leaves it unread past the slow-client
  bound is closed (its sessions released, as on a WebSocket disconnect);
- a connection with no open stream and no POST in progress for ``idle_secs`` is
  closed too: nobody is there to read what it would send.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

import orjson

from services.common.logs import get_logger
from services.common.protocol import M_SESSION_UPDATE, META_ACPGATE, META_EVENT_ID
from services.edge.caller import Caller
from services.edge.transport.outqueue import DEFAULT_SLOW_CLIENT_TIMEOUT, PutResult
from services.edge.transport.streamable.routing import (
    CAPTURED,
    CONNECTION,
    Inbound,
    Router,
    StreamKey,
)
from services.edge.transport.streamable.streams import Budget, EventStream

__all__ = ["ConnectionGone", "StreamableConnection"]

#: POSTed messages held for the dialect before a POST waits (the dialect reads ahead itself).
INBOX_MESSAGES: Final = 64

log = get_logger("edge.http")


def _event_id(message: Any) -> int:
    """A ``session/update``'s ``_meta.acpgate.eventId`` (acpgate's own: an agent's never
    reaches a client), else 0."""
    if not isinstance(message, dict) or message.get("method") != M_SESSION_UPDATE:
        return 0
    try:
        value = message["params"]["update"]["_meta"][META_ACPGATE][META_EVENT_ID]
    except (KeyError, TypeError):
        return 0
    return value if type(value) is int and value > 0 else 0


class ConnectionGone(Exception):
    """The connection closed while a request waited on it (answered like an unknown one)."""


class StreamableConnection:
    """The state of one ``Acp-Connection-Id``: who made it, its streams, its inbox."""

    def __init__(self, conn_id: str, caller: Caller, *, idle_secs: float,
                 budget: Budget | None = None,
                 slow_client_timeout: float = DEFAULT_SLOW_CLIENT_TIMEOUT,
                 on_slow_client: Callable[[StreamableConnection], None] = lambda c: None,
                 on_close: Callable[[StreamableConnection], None] = lambda c: None) -> None:
        self.id = conn_id
        self.caller = caller
        self.budget = budget if budget is not None else Budget()
        self.router = Router(evict=self._evict)
        self.streams: dict[StreamKey, EventStream] = {CONNECTION: EventStream(CONNECTION)}
        self._idle_secs = idle_secs
        self._slow_client_timeout = slow_client_timeout
        self._on_slow_client = on_slow_client
        self._on_close = on_close
        self._inbox: deque[str] = deque()
        #: Set when the inbox gains a message (the dialect waits) / makes room (a POST waits).
        self._inbox_data = asyncio.Event()
        self._inbox_room = asyncio.Event()
        self._closed_ev = asyncio.Event()
        #: Set whenever a reader wrote events (flush waits on it).
        self._progress = asyncio.Event()
        self._initialized: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future())
        #: Open SSE readers and POSTs in progress: while either is nonzero it is not idle.
        self.readers = 0
        self._posting = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self.closed = False
        #: Why it closed ("delete", "idle", "slow client", …), for logs.
        self.close_reason = ""
        #: Messages read from the client so far (logged on close).
        self.received = 0
        self._touch()

    # ------------------------------------------------------------ the dialect's side

    async def frames(self) -> AsyncIterator[str]:
        """The client's messages, in POST order, until the connection closes."""
        while not self.closed:
            if self._inbox:
                message = self._inbox.popleft()
                self._inbox_room.set()
                yield message
                continue
            self._inbox_data.clear()
            await self._inbox_data.wait()

    async def send(self, line: str) -> None:
        """Route one message of the dialect (never raises; dropped once closed)."""
        await self.send_many([line])

    async def send_many(self, lines: Sequence[str]) -> None:
        """Route messages in order onto their streams, charged to the budget."""
        if self.closed:
            return
        routed: list[tuple[StreamKey, str, int]] = []
        for line in lines:
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                message = None
            key = self.router.route(message)
            if key == CAPTURED:
                if not self._initialized.done():
                    self._initialized.set_result(message)
                continue
            routed.append((key, line, _event_id(message)))
        if not routed:
            return

        def commit() -> None:
            for key, line, event_id in routed:
                self.stream(key).append(line, event_id)

        result = await self.budget.admit(sum(len(line) for _, line, _ in routed), len(routed),
                                         commit, self._slow_client_timeout)
        if result in (PutResult.TIMED_OUT, PutResult.OVERFLOW) and not self.closed:
            log.warning("http_slow_client", conn=self.id[:8], why=result.value,
                        pending=self.budget.messages, pending_chars=self.budget.chars)
            self._on_slow_client(self)
            self.close("slow client")

    def stream(self, key: StreamKey) -> EventStream:
        """The stream of ``key``; an attached session's is made on first use, a detached
        one's messages go on the connection stream."""
        stream = self.streams.get(key)
        if stream is not None:
            return stream
        if key is not CONNECTION and key in self.router.attached:
            stream = self.streams[key] = EventStream(key)
            return stream
        return self.streams[CONNECTION]

    def written(self, chars: int, count: int) -> None:
        """A reader wrote ``count`` pending messages for the first time."""
        self.budget.release(chars, count)
        self._progress.set()

    # ------------------------------------------------------------ the client's side

    async def deliver(self, text: str, msg: Inbound, header: str | None) -> None:
        """Hand one POSTed message to the dialect, waiting while the inbox is full."""
        self._posting += 1
        self._touch()
        try:
            while len(self._inbox) >= INBOX_MESSAGES and not self.closed:
                self._inbox_room.clear()
                await self._inbox_room.wait()
            if self.closed:
                raise ConnectionGone
            self.router.accepted(msg, header)
            self._inbox.append(text)
            self.received += 1
            self._inbox_data.set()
        finally:
            self._posting -= 1
            self._touch()

    async def initialized(self, wait_secs: float) -> dict[str, Any]:
        """The dialect's answer to the ``initialize`` that opened this connection."""
        gone: asyncio.Future[Any] = asyncio.ensure_future(self._closed_ev.wait())
        waits: set[asyncio.Future[Any]] = {self._initialized, gone}
        try:
            done, _ = await asyncio.wait(waits, timeout=wait_secs,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if self._initialized.done():
            return self._initialized.result()
        raise ConnectionGone if done else TimeoutError

    async def wait_closed(self) -> None:
        """Return once the connection closed."""
        await self._closed_ev.wait()

    def attach(self, sid: str) -> bool:
        """Attach session ``sid`` (its stream made); False when every slot is in use."""
        if not self.router.attach(sid):
            return False
        if sid not in self.streams:
            self.streams[sid] = EventStream(sid)
        return True

    def _evict(self) -> str | None:
        """Drop the least recently attached idle session stream; its id, or None."""
        for sid in self.router.attached:
            stream = self.streams.get(sid)
            if stream is None or stream.idle:
                self.streams.pop(sid, None)
                return sid
        return None

    def reading(self, delta: int) -> None:
        """An SSE reader opened (+1) or ended (-1)."""
        self.readers += delta
        self._touch()

    # ------------------------------------------------------------ idle, close

    def _touch(self) -> None:
        """Arm the idle timer when nothing uses the connection, disarm it otherwise."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if not self.closed and not self.readers and not self._posting:
            self._idle_timer = asyncio.get_running_loop().call_later(
                self._idle_secs, self.close, "idle")

    def pending(self) -> bool:
        """True while a stream that has a reader still has events to write."""
        return any(s.pending and s.reader is not None for s in self.streams.values())

    async def flush(self, wait_secs: float) -> None:
        """Wait (at most ``wait_secs``) until every read stream wrote what it holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_secs
        while self.pending() and not self.closed:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), left)
            except TimeoutError:
                return

    def close(self, reason: str) -> None:
        """End the connection: no more input for the dialect, every stream ends. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._inbox.clear()
        self._inbox_data.set()
        self._inbox_room.set()
        self._closed_ev.set()
        self.budget.close()
        for stream in self.streams.values():
            stream.close()
        self._on_close(self)
