"""The outgoing side of one WebSocket connection: a bounded queue and its pump (SPEC §11).

Everything a connection sends goes through an :class:`OutgoingQueue` bounded in
characters and messages; an :class:`Outbox` pumps it onto the socket, what is
queued when the pump wakes in one write (:mod:`services.edge.transport.ws_frames`). When the
queue is full, ``send`` waits (backpressure on that connection's relay only).
What waits is bounded too — in sends and in characters — since every request a
client sends has an answer that must wait somewhere: past that bound, or when
the client still does not read within ``slow_client_timeout``, the connection
is closed with :data:`SLOW_CLIENT_CLOSE_CODE` and everything it held is
dropped, so a client that stops reading can never grow the edge's memory
without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from services.common.logs import get_logger
from services.edge.transport.ws_frames import TextFrames

#: Per-connection outgoing budget in characters and messages (a single larger message is
#: still accepted alone, so one 10 MiB blob frame passes).
DEFAULT_QUEUE_CHARS = 8 * 1024 * 1024
DEFAULT_QUEUE_MESSAGES = 1024
#: Sends that may wait for room behind a full queue, and their characters (the oldest
#: waiting send is not counted: it is being let in; two 10 MiB blobs fit behind it).
#: Below the dialect's requests in flight (``services.edge.dialect.dispatch.MAX_IN_FLIGHT``), so
#: a client that stops reading meets this bound (and is closed) before that one pauses it.
DEFAULT_WAITING_SENDS = 256
DEFAULT_WAITING_CHARS = 32 * 1024 * 1024
DEFAULT_SLOW_CLIENT_TIMEOUT = 30.0
#: Characters the pump takes off the queue for one socket write (at least one message):
#: what is queued already goes out together, nothing waits to fill a run. Bounds what is
#: held outside the queue's own bound while a write waits for the socket (twice the
#: websockets write limit).
WRITE_RUN_CHARS = 64 * 1024
#: Close code for a client that stopped reading (policy violation) and its reasons.
SLOW_CLIENT_CLOSE_CODE = 1008
SLOW_CLIENT_REASON = "slow client: outgoing queue full"
BACKLOG_REASON = "slow client: too many answers waiting"

log = get_logger("edge.ws")


class PutResult(Enum):
    """What happened to a message offered to an :class:`OutgoingQueue`."""

    QUEUED = "queued"
    CLOSED = "closed"
    TIMED_OUT = "timed_out"
    #: Not queued: as many sends as allowed already wait for room.
    OVERFLOW = "overflow"


@dataclass
class _Waiting:
    """One send that did not fit: the messages still outside the queue, oldest first."""

    future: asyncio.Future[PutResult]
    messages: deque[str]
    chars: int


class OutgoingQueue:
    """A FIFO bounded in characters and messages; ``put`` waits for room, boundedly.

    The common case costs no lock, timer or task: a message that fits is
    appended at once and the pump is woken through an Event. Only a send that
    does not fit waits, in FIFO order among waiting sends (a large message is
    not overtaken forever by small ones; the messages of one ``put_many`` stay
    together and in order), and the getter hands room to the oldest waiter
    directly. At most ``max_waiting`` sends (``max_waiting_chars`` characters
    behind the oldest) wait; one more is refused with ``OVERFLOW``.

    The Streamable HTTP transport applies the same bounds with
    :class:`~services.edge.transport.streamable.streams.Budget`, which is a ledger, not a
    queue: its messages sit on several replayable streams, not here, so it charges a
    send whole and frees it when a stream's reader wrote it. This queue holds the
    messages of one socket itself, and lets a waiting send in message by message.
    """

    def __init__(self, max_chars: int = DEFAULT_QUEUE_CHARS,
                 max_messages: int = DEFAULT_QUEUE_MESSAGES,
                 max_waiting: int = DEFAULT_WAITING_SENDS,
                 max_waiting_chars: int = DEFAULT_WAITING_CHARS) -> None:
        self.max_chars = max_chars
        self.max_messages = max_messages
        self.max_waiting = max_waiting
        self.max_waiting_chars = max_waiting_chars
        self._items: deque[str] = deque()
        self._chars = 0
        #: Set while something is queued (or the queue closed): what ``get`` waits on.
        self._data = asyncio.Event()
        #: Sends that did not fit, oldest first, and the characters they still hold.
        self._waiters: deque[_Waiting] = deque()
        self._waiting_chars = 0
        self.closed = False
        #: The most characters ever queued at once (for tests and diagnostics).
        self.peak_chars = 0
        #: The most sends that ever waited at once.
        self.peak_waiting = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def chars(self) -> int:
        """Characters queued now."""
        return self._chars

    @property
    def waiting(self) -> int:
        """Sends waiting for room now."""
        return len(self._waiters)

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
        """Move waiting messages into the queue, oldest first, while they fit."""
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.future.done():  # timed out or cancelled meanwhile
                waiters.popleft()
                self._waiting_chars -= head.chars
                continue
            while head.messages and self._fits(len(head.messages[0])):
                message = head.messages.popleft()
                size = len(message)
                head.chars -= size
                self._waiting_chars -= size
                self._append(message, size)
            if head.messages:
                return
            waiters.popleft()
            head.future.set_result(PutResult.QUEUED)

    def _overflows(self, chars: int) -> bool:
        """True when a send of ``chars`` more characters may not wait as well."""
        if not self._waiters:
            return False  # the oldest waiting send is always let wait, whatever its size
        behind_oldest = self._waiting_chars - self._waiters[0].chars
        return (len(self._waiters) >= self.max_waiting
                or behind_oldest + chars > self.max_waiting_chars)

    async def put(self, message: str, wait_secs: float) -> PutResult:
        """Queue ``message``, waiting up to ``wait_secs`` seconds for room."""
        if self.closed:
            return PutResult.CLOSED
        size = len(message)
        if not self._waiters and self._fits(size):
            self._append(message, size)
            return PutResult.QUEUED
        return await self._wait([message], size, wait_secs)

    async def put_many(self, messages: Sequence[str], wait_secs: float) -> PutResult:
        """Queue ``messages`` in order and together; waits (as ``put``) for what does not fit."""
        if self.closed:
            return PutResult.CLOSED
        start = 0
        if not self._waiters:
            while start < len(messages) and self._fits(len(messages[start])):
                self._append(messages[start], len(messages[start]))
                start += 1
        if start == len(messages):
            return PutResult.QUEUED
        rest = messages[start:]
        return await self._wait(rest, sum(len(m) for m in rest), wait_secs)

    async def _wait(self, messages: Sequence[str], chars: int, wait_secs: float) -> PutResult:
        if self._overflows(chars):
            return PutResult.OVERFLOW
        fut: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(fut, deque(messages), chars)
        self._waiters.append(waiting)
        self._waiting_chars += chars
        self.peak_waiting = max(self.peak_waiting, len(self._waiters))
        try:
            return await asyncio.wait_for(fut, wait_secs)
        except TimeoutError:
            return PutResult.TIMED_OUT
        finally:
            if not fut.done() or fut.cancelled():
                self._give_up(waiting)

    def _give_up(self, waiting: _Waiting) -> None:
        """A send that stopped waiting (its caller was cancelled — e.g. a relayed request
        the agent withdrew — or it timed out): what it still held no longer waits, and
        stops counting against the bound at once, not when it reaches the head."""
        try:
            self._waiters.remove(waiting)
        except ValueError:
            return  # already admitted or dropped
        self._waiting_chars -= waiting.chars
        if self._waiters and not self.closed:
            self._admit_waiters()  # the next one may fit where this one did not

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
            waiting = self._waiters.popleft()
            if not waiting.future.done():
                waiting.future.set_result(PutResult.CLOSED)
        self._waiting_chars = 0


class Outbox:
    """Sends of one WebSocket connection: queued in order, pumped onto the socket by one task.

    ``send`` and ``send_many`` never raise: after the connection went away, or
    after this outbox closed a slow client, a message is dropped at once.
    ``on_slow_client`` is called once when a client is closed for not reading
    (the gateway counts it).
    """

    def __init__(
        self,
        ws: ServerConnection,
        *,
        conn_id: int,
        max_chars: int = DEFAULT_QUEUE_CHARS,
        max_messages: int = DEFAULT_QUEUE_MESSAGES,
        max_waiting: int = DEFAULT_WAITING_SENDS,
        max_waiting_chars: int = DEFAULT_WAITING_CHARS,
        slow_client_timeout: float = DEFAULT_SLOW_CLIENT_TIMEOUT,
        close_timeout: float = 5.0,
        on_slow_client: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = OutgoingQueue(max_chars, max_messages, max_waiting, max_waiting_chars)
        self._ws = ws
        self._conn_id = conn_id
        self._slow_client_timeout = slow_client_timeout
        self._close_timeout = close_timeout
        self._on_slow_client = on_slow_client
        self._closing: list[asyncio.Task[None]] = []
        #: True while the pump writes a run; ``_wrote`` is set after each run (for flush).
        self._writing = False
        self._wrote = asyncio.Event()
        self._pump = asyncio.create_task(self._run())

    @property
    def closed(self) -> bool:
        """True once nothing more will be sent: the client went away or is being closed.

        The gateway stops reading a connection's requests then: their answers could
        only be dropped.
        """
        return self.queue.closed

    async def _run(self) -> None:
        queue, frames = self.queue, TextFrames(self._ws)
        try:
            while (message := await queue.get()) is not None:
                # What is already queued goes out in one write, up to WRITE_RUN_CHARS.
                run = [message]
                size = len(message)
                while size < WRITE_RUN_CHARS and (message := queue.get_nowait()) is not None:
                    run.append(message)
                    size += len(message)
                self._writing = True
                await frames.write(run)
                self._writing = False
                self._wrote.set()
        except ConnectionClosed:
            pass
        finally:
            await queue.close()  # later sends are dropped at once, never block
            self._wrote.set()

    async def flush(self, wait_secs: float) -> None:
        """Wait until what is queued now has been written (at once when the connection is
        gone; at most ``wait_secs``): a stopping gateway's last answers before its close."""
        async def written() -> None:
            queue = self.queue
            while not queue.closed and (len(queue) or queue.waiting or self._writing):
                self._wrote.clear()
                await self._wrote.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(written(), wait_secs)

    async def send(self, message: str) -> None:
        """Queue one message; a client that does not make room in time is closed."""
        await self._settle(await self.queue.put(message, self._slow_client_timeout))

    async def send_many(self, messages: Sequence[str]) -> None:
        """Queue ``messages`` in order, together; the same rules as :meth:`send`."""
        await self._settle(await self.queue.put_many(messages, self._slow_client_timeout))

    async def _settle(self, result: PutResult) -> None:
        if result in (PutResult.TIMED_OUT, PutResult.OVERFLOW) and not self._closing:
            self._on_slow_client()
            queue = self.queue
            why = "timeout" if result is PutResult.TIMED_OUT else "backlog"
            log.warning("ws_slow_client", conn=self._conn_id, why=why,
                        queued=len(queue), queued_chars=queue.chars, waiting=queue.waiting)
            await queue.close()
            reason = SLOW_CLIENT_REASON if result is PutResult.TIMED_OUT else BACKLOG_REASON
            self._closing.append(asyncio.create_task(self._close_slow(reason)))
        # CLOSED / after a slow-client close: the connection is going away; drop.

    async def _close_slow(self, reason: str) -> None:
        """Close a non-reading client with the slow-client code, abort if it won't take it."""
        ws = self._ws
        try:
            await asyncio.wait_for(ws.close(SLOW_CLIENT_CLOSE_CODE, reason), self._close_timeout)
        except (TimeoutError, ConnectionClosed):
            pass
        finally:
            ws.transport.abort()

    async def aclose(self) -> None:
        """Drop what is still queued, stop the pump, finish a slow-client close."""
        await self.queue.close()
        self._pump.cancel()
        await asyncio.gather(self._pump, *self._closing, return_exceptions=True)
