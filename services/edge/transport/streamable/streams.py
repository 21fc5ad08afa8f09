"""The streams of one Streamable HTTP connection: numbered events, replay, and the shared bound.

Each :class:`EventStream` (the connection-scoped one, one per attached session)
numbers what is put on it (the SSE ``id``) and keeps it in one log: the events
from its cursor on are *pending* (not yet written to any reader), the ones
before it *retained* for a reader that comes back with ``Last-Event-ID``. The
retained part is bounded per stream (:data:`REPLAY_EVENTS`, :data:`REPLAY_CHARS`):
a reader asking for more than is held gets the oldest it can, told of the gap.

Pending events are bounded per connection by a :class:`Budget` in characters and
messages — today's WebSocket bounds (``services.edge.transport.outqueue``): a send that
does not fit waits for room (backpressure on that connection only), in order; at
most so many sends wait, and none longer than the slow-client timeout; past that
the connection is closed, so a client that reads no stream (or never opens one)
cannot grow the edge.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from services.edge.transport.outqueue import (
    DEFAULT_QUEUE_CHARS,
    DEFAULT_QUEUE_MESSAGES,
    DEFAULT_WAITING_CHARS,
    DEFAULT_WAITING_SENDS,
    PutResult,
)

__all__ = ["REPLAY_CHARS", "REPLAY_EVENTS", "Budget", "Event", "EventStream", "Gap"]

#: Events (and their characters) one stream keeps after writing them, for a resuming reader.
REPLAY_EVENTS: Final = 512
REPLAY_CHARS: Final = 512 * 1024
#: Runs of (SSE id, session event id) a stream keeps to find, for a ``Last-Event-ID`` it no
#: longer holds, the session's event it stood at (a run: both ids rising together).
MAX_RUNS: Final = 4096


@dataclass(frozen=True)
class Event:
    """One message on a stream: its SSE id and its JSON text."""

    id: int
    data: str


@dataclass(frozen=True)
class Gap:
    """A resume asked for events no longer held: ``missed_from``..``missed_to`` are lost."""

    last_event_id: int
    missed_from: int
    missed_to: int


class EventStream:
    """One stream's log, cursor and current reader (``key``: None or the session id)."""

    def __init__(self, key: str | None) -> None:
        self.key = key
        self._log: deque[Event] = deque()
        self.next_id = 1
        #: The id of the next event to write to a reader.
        self.cursor = 1
        #: The highest id ever written (what was written again after a resume is not new).
        self.written = 0
        self._retained_chars = 0
        #: The current reader's token (a new reader replaces the old one), or None.
        self.reader: object | None = None
        #: Set when something changes a reader waits for: events, a new reader, the close.
        self.wake = asyncio.Event()
        self.closed = False
        #: (first SSE id, its session event id, length) of the session updates put on it.
        self._runs: deque[tuple[int, int, int]] = deque()
        self._runs_dropped = False

    @property
    def pending(self) -> bool:
        """True while events wait to be written."""
        return self.cursor < self.next_id

    @property
    def idle(self) -> bool:
        """No reader and nothing pending: the stream may be dropped."""
        return self.reader is None and not self.pending

    def append(self, data: str, event_id: int = 0) -> None:
        """Put one message on the stream (the caller charged the connection's budget);
        ``event_id``: the session's event id of a ``session/update`` (0: none)."""
        if event_id:
            runs = self._runs
            if runs and runs[-1][0] + runs[-1][2] == self.next_id \
                    and runs[-1][1] + runs[-1][2] == event_id:
                start, first, length = runs.pop()
                runs.append((start, first, length + 1))
            else:
                runs.append((self.next_id, event_id, 1))
                if len(runs) > MAX_RUNS:
                    runs.popleft()
                    self._runs_dropped = True
        self._log.append(Event(self.next_id, data))
        self.next_id += 1
        self.wake.set()

    def session_point(self, sse_id: int) -> int | None:
        """The newest session event id put on the stream at or before ``sse_id`` (0: none
        was); None when the stream no longer knows."""
        point = 0
        for start, first, length in self._runs:
            if start > sse_id:
                break
            point = first + min(length, sse_id - start + 1) - 1
        if not point and self._runs_dropped:
            return None
        return point

    def session_after(self, sse_id: int) -> int:
        """The first session event id put on the stream at or after ``sse_id``; else one
        above the newest put on it (what comes later is above that)."""
        newest = 0
        for start, first, length in self._runs:
            if start + length > sse_id:
                return first + max(0, sse_id - start)
            newest = first + length - 1
        return newest + 1

    def attach(self, last_event_id: int | None) -> tuple[object, Gap | None]:
        """A new reader (the old one, if any, stops): its token, and the gap when
        ``last_event_id`` asks for events no longer held. ValueError for an id this
        stream never sent."""
        if last_event_id is not None:
            if not 0 <= last_event_id < self.next_id:
                raise ValueError(f"Last-Event-ID {last_event_id} was never sent on this stream "
                                 f"(its last event is {self.next_id - 1})")
            oldest = self._log[0].id if self._log else self.next_id
            gap = None
            if last_event_id + 1 < oldest:
                gap = Gap(last_event_id, last_event_id + 1, oldest - 1)
            self._rewind(max(last_event_id + 1, oldest))
        else:
            gap = None
        token = object()
        self.reader = token
        self.wake.set()
        return token, gap

    def detach(self, token: object) -> None:
        """The reader ``token`` went away (nothing happens if another replaced it)."""
        if self.reader is token:
            self.reader = None

    def _rewind(self, to: int) -> None:
        if to >= self.cursor:
            return
        for event in self._log:
            if to <= event.id < self.cursor:
                self._retained_chars -= len(event.data)
        self.cursor = to

    def take(self, max_chars: int) -> tuple[list[Event], int, int]:
        """Events from the cursor on (at least one, about ``max_chars``), the cursor moved
        past them; with the characters and count of those written for the first time
        (what the connection's budget gets back)."""
        out: list[Event] = []
        size = fresh_chars = fresh = 0
        if not self._log or self.cursor >= self.next_id:
            return out, 0, 0
        start = self.cursor - self._log[0].id
        for index in range(start, len(self._log)):
            event = self._log[index]
            out.append(event)
            size += len(event.data)
            if event.id > self.written:
                fresh_chars += len(event.data)
                fresh += 1
            if size >= max_chars:
                break
        self.cursor = out[-1].id + 1
        self.written = max(self.written, out[-1].id)
        self._retained_chars += size
        self._trim()
        return out, fresh_chars, fresh

    def _trim(self) -> None:
        """Drop retained events past the replay bound, oldest first."""
        log = self._log
        while log and log[0].id < self.cursor and (
                self._retained_chars > REPLAY_CHARS or self.cursor - log[0].id > REPLAY_EVENTS):
            self._retained_chars -= len(log.popleft().data)

    def close(self) -> None:
        """No more events; the reader ends its response."""
        self.closed = True
        self.wake.set()


@dataclass
class _Waiter:
    future: asyncio.Future[PutResult]
    chars: int
    count: int
    commit: Callable[[], None]


class Budget:
    """The pending characters and messages of one connection, across its streams.

    ``admit`` charges a send and runs its ``commit`` (which puts the messages on
    their streams) when it fits — at once, or, in arrival order, once earlier
    sends were written (``release``); so every stream keeps the order of sends.

    The bounds and their rules are a WebSocket connection's
    (:class:`~services.edge.transport.outqueue.OutgoingQueue`); the difference is where
    the messages are: that queue holds one socket's messages itself and hands them to its
    pump, while here they sit on the connection's streams (kept for replay after they
    were written), so this only counts them: a send is charged whole, all its messages
    at once, and released by whoever wrote them.
    """

    def __init__(self, max_chars: int = DEFAULT_QUEUE_CHARS,
                 max_messages: int = DEFAULT_QUEUE_MESSAGES,
                 max_waiting: int = DEFAULT_WAITING_SENDS,
                 max_waiting_chars: int = DEFAULT_WAITING_CHARS) -> None:
        self.max_chars = max_chars
        self.max_messages = max_messages
        self.max_waiting = max_waiting
        self.max_waiting_chars = max_waiting_chars
        self.chars = 0
        self.messages = 0
        self._waiters: deque[_Waiter] = deque()
        self._waiting_chars = 0
        self.closed = False
        #: The most characters ever pending at once (diagnostics, tests).
        self.peak_chars = 0

    def _fits(self, chars: int, count: int) -> bool:
        if not self.messages:  # one message of any size passes alone
            return True
        return self.chars + chars <= self.max_chars and self.messages + count <= self.max_messages

    def _charge(self, waiter: _Waiter) -> None:
        self.chars += waiter.chars
        self.messages += waiter.count
        self.peak_chars = max(self.peak_chars, self.chars)
        waiter.commit()

    async def admit(self, chars: int, count: int, commit: Callable[[], None],
                    wait_secs: float) -> PutResult:
        """Charge ``chars``/``count`` and ``commit``, waiting up to ``wait_secs`` for room."""
        if self.closed:
            return PutResult.CLOSED
        waiter = _Waiter(asyncio.get_running_loop().create_future(), chars, count, commit)
        if not self._waiters and self._fits(chars, count):
            self._charge(waiter)
            return PutResult.QUEUED
        if self._waiters and (len(self._waiters) >= self.max_waiting
                              or self._waiting_chars + chars > self.max_waiting_chars):
            return PutResult.OVERFLOW
        self._waiters.append(waiter)
        self._waiting_chars += chars
        try:
            return await asyncio.wait_for(waiter.future, wait_secs)
        except TimeoutError:
            return PutResult.TIMED_OUT
        finally:
            if not waiter.future.done() or waiter.future.cancelled():
                self._drop(waiter)

    def _drop(self, waiter: _Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return
        self._waiting_chars -= waiter.chars
        self._admit()

    def release(self, chars: int, count: int) -> None:
        """``chars``/``count`` were written: let waiting sends in, oldest first."""
        self.chars -= chars
        self.messages -= count
        self._admit()

    def _admit(self) -> None:
        while self._waiters and not self.closed:
            head = self._waiters[0]
            if head.future.done():
                self._waiters.popleft()
                self._waiting_chars -= head.chars
                continue
            if not self._fits(head.chars, head.count):
                return
            self._waiters.popleft()
            self._waiting_chars -= head.chars
            self._charge(head)
            head.future.set_result(PutResult.QUEUED)

    def close(self) -> None:
        """Every waiting send answers CLOSED; later ones too."""
        self.closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_result(PutResult.CLOSED)
        self._waiting_chars = 0
