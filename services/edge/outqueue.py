"""The outgoing side of one WebSocket connection: a bounded queue and its pump (SPEC §11).

Everything a connection sends goes through an :class:`OutgoingQueue` bounded in
characters and messages; an :class:`Outbox` pumps it onto the socket. When the
queue is full, ``send`` waits (backpressure on that connection's relay only);
if the client still does not read within ``slow_client_timeout`` the
connection is closed with :data:`SLOW_CLIENT_CLOSE_CODE`, so a client that
stops reading can never grow the edge's memory without bound.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from enum import Enum

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from services.common.logs import get_logger

#: Per-connection outgoing budget in characters and messages (a single larger message is
#: still accepted alone, so one 10 MiB blob frame passes).
DEFAULT_QUEUE_CHARS = 8 * 1024 * 1024
DEFAULT_QUEUE_MESSAGES = 1024
DEFAULT_SLOW_CLIENT_TIMEOUT = 30.0
#: Close code for a client that stopped reading (policy violation) and its reason.
SLOW_CLIENT_CLOSE_CODE = 1008
SLOW_CLIENT_REASON = "slow client: outgoing queue full"

log = get_logger("edge.ws")


class PutResult(Enum):
    """What happened to a message offered to an :class:`OutgoingQueue`."""

    QUEUED = "queued"
    CLOSED = "closed"
    TIMED_OUT = "timed_out"


class OutgoingQueue:
    """A FIFO bounded in characters and messages; ``put`` waits for room.

    The common case costs no lock, timer or task: a message that fits is
    appended at once and the pump is woken through an Event. Only a put that
    does not fit waits, in FIFO order among waiting puts (a large message is not
    overtaken forever by small ones), and the getter hands room to the oldest
    waiter directly.
    """

    def __init__(self, max_chars: int = DEFAULT_QUEUE_CHARS,
                 max_messages: int = DEFAULT_QUEUE_MESSAGES) -> None:
        self.max_chars = max_chars
        self.max_messages = max_messages
        self._items: deque[str] = deque()
        self._chars = 0
        #: Set while something is queued (or the queue closed): what ``get`` waits on.
        self._data = asyncio.Event()
        #: Puts that did not fit, oldest first: (their future, message, size).
        self._waiters: deque[tuple[asyncio.Future[PutResult], str, int]] = deque()
        self.closed = False
        #: The most characters ever queued at once (for tests and diagnostics).
        self.peak_chars = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def chars(self) -> int:
        """Characters queued now."""
        return self._chars

    def _fits(self, size: int) -> bool:
        # An empty queue accepts any single message, so one large frame still passes.
        if not self._items:
            return True
        return self._chars + size <= self.max_chars and len(self._items) < self.max_messages

    def _append(self, message: str, size: int) -> None:
        self._items.append(message)
        self._chars += size
        if self._chars > self.peak_chars:
            self.peak_chars = self._chars
        self._data.set()

    def _admit_waiters(self) -> None:
        """Move waiting puts into the queue, oldest first, while they fit."""
        waiters = self._waiters
        while waiters:
            fut, message, size = waiters[0]
            if fut.done():  # timed out or cancelled meanwhile
                waiters.popleft()
                continue
            if not self._fits(size):
                return
            waiters.popleft()
            self._append(message, size)
            fut.set_result(PutResult.QUEUED)

    async def put(self, message: str, wait_secs: float) -> PutResult:
        """Queue ``message``, waiting up to ``wait_secs`` seconds for room."""
        if self.closed:
            return PutResult.CLOSED
        size = len(message)
        if not self._waiters and self._fits(size):
            self._append(message, size)
            return PutResult.QUEUED
        fut: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, message, size))
        try:
            return await asyncio.wait_for(fut, wait_secs)
        except TimeoutError:
            return PutResult.TIMED_OUT

    def get_nowait(self) -> str | None:
        """The next message if one is queued (and the queue is open), else ``None``."""
        if self.closed or not self._items:
            return None
        message = self._items.popleft()
        self._chars -= len(message)
        if self._waiters:
            self._admit_waiters()
        return message

    async def get(self) -> str | None:
        """The next message, or ``None`` once closed (queued messages are dropped then)."""
        while True:
            if self.closed:
                return None
            if self._items:
                return self.get_nowait()
            self._data.clear()
            await self._data.wait()

    async def close(self) -> None:
        """Wake every waiter; later puts answer CLOSED, gets answer None."""
        self.closed = True
        self._items.clear()
        self._chars = 0
        self._data.set()
        while self._waiters:
            fut, _, _ = self._waiters.popleft()
            if not fut.done():
                fut.set_result(PutResult.CLOSED)


class Outbox:
    """Sends of one WebSocket connection: queued in order, pumped onto the socket by one task.

    ``send`` never raises: after the connection went away, or after this outbox
    closed a slow client, a message is dropped at once. ``on_slow_client`` is
    called once when a client is closed for not reading (the gateway counts it).
    """

    def __init__(
        self,
        ws: ServerConnection,
        *,
        conn_id: int,
        max_chars: int = DEFAULT_QUEUE_CHARS,
        max_messages: int = DEFAULT_QUEUE_MESSAGES,
        slow_client_timeout: float = DEFAULT_SLOW_CLIENT_TIMEOUT,
        close_timeout: float = 5.0,
        on_slow_client: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = OutgoingQueue(max_chars, max_messages)
        self._ws = ws
        self._conn_id = conn_id
        self._slow_client_timeout = slow_client_timeout
        self._close_timeout = close_timeout
        self._on_slow_client = on_slow_client
        self._closing: list[asyncio.Task[None]] = []
        self._pump = asyncio.create_task(self._run())

    async def _run(self) -> None:
        queue, ws = self.queue, self._ws
        try:
            while (message := await queue.get()) is not None:
                await ws.send(message)
                # Everything already queued goes out before waiting again.
                while (message := queue.get_nowait()) is not None:
                    await ws.send(message)
        except ConnectionClosed:
            pass
        finally:
            await queue.close()  # later sends are dropped at once, never block

    async def send(self, message: str) -> None:
        """Queue one message; a client that does not make room in time is closed."""
        queue = self.queue
        result = await queue.put(message, self._slow_client_timeout)
        if result is PutResult.TIMED_OUT and not self._closing:
            self._on_slow_client()
            log.warning("ws_slow_client", conn=self._conn_id, queued_chars=queue.peak_chars)
            await queue.close()
            self._closing.append(asyncio.create_task(self._close_slow()))
        # CLOSED / after a slow-client close: the connection is going away; drop.

    async def _close_slow(self) -> None:
        """Close a non-reading client with the slow-client code, abort if it won't take it."""
        ws = self._ws
        try:
            await asyncio.wait_for(ws.close(SLOW_CLIENT_CLOSE_CODE, SLOW_CLIENT_REASON),
                                   self._close_timeout)
        except (TimeoutError, ConnectionClosed):
            pass
        finally:
            ws.transport.abort()

    async def aclose(self) -> None:
        """Drop what is still queued, stop the pump, finish a slow-client close."""
        await self.queue.close()
        self._pump.cancel()
        await asyncio.gather(self._pump, *self._closing, return_exceptions=True)
