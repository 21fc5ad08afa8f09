"""The edge's side of the session's event log: every event stored as it flows, by group commit.

Each update the edge relays (its line as the clients got it, with its event id) and
each client action that changes the conversation is handed to :class:`EventLog`,
which keeps it in a per-session pending part — a list append on the relay's path,
nothing encoded or parsed — and sends every session's part in one ``AppendEvents``
(sooner once :data:`COMMIT_BYTES` are pending): one transaction for many sessions. An
event is durable within about :data:`COMMIT_SECS` of being relayed, whatever the store's
commit takes: the wait between two batches is :data:`COMMIT_SECS` less the time recent
batches took to commit (at least :data:`MIN_WAIT_SECS`), so a crash loses at most what
the clients got in that last window. With nothing pending the sending loop has no timer:
the first event handed in wakes it, and its batch goes :data:`COMMIT_SECS` later. A part goes as a few chunks, not a message per
event: the relayed lines of consecutive ids joined as they are
(:mod:`~services.edge.sessions.log_chunks`), stored as one row each. A batch
acknowledged is durable; a crash loses at most the batch not yet sent.

The store unreachable (UNAVAILABLE, or no answer): the parts stay pending, new events
join them, and the batch is sent again until the store answers — an event already
stored is skipped there (a chunk is sent again with the same bounds), so nothing is
written twice. The pending events are bounded
(:data:`MAX_PENDING_BYTES`); a session whose events no longer fit loses its log
here and its running turn fails with :data:`~services.common.protocol.MSG_LOG_LOST`.
Each part carries the claim generation its events were made under: a host that lost its
claim meanwhile
has its part refused (fenced), drops it and ends the session as taken over. A part
past a storage quota is refused too (none of its events stored): the turns it had
events of answer the quota's sentence (:meth:`EventLog.quota_refusal`).

For measurement only (``make bench``'s log-off rows), :data:`OFF_ENV` = ``1`` in the
edge's environment turns the log off: nothing is written, and a later ``session/load``
replays nothing of the turns run meanwhile. It is no configuration key on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from services.common.log_forms import FORM_LINES
from services.common.logs import get_logger
from services.common.protocol import MSG_LOG_LOST, REFUSED_QUOTA
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import EventBatch
from services.edge.sessions.log_chunks import Chunk, pack_relayed

if TYPE_CHECKING:
    from services.edge.backends.session import SessionBackend
    from services.edge.sessions.feed import Event

__all__ = ["COMMIT_BYTES", "COMMIT_SECS", "MAX_PENDING_BYTES", "OFF_ENV",
           "EventLog"]

log = get_logger("edge.event_log")

#: The longest an event waits before its batch is durable (the wait, then the commit).
COMMIT_SECS: Final = 0.05
#: The shortest wait between two batches (a store slower than :data:`COMMIT_SECS` to
#: commit gets a batch as often as this, never one after the other with no pause).
MIN_WAIT_SECS: Final = 0.005
#: How much of a batch's commit time the running estimate takes in (the rest: earlier ones).
_COMMIT_WEIGHT: Final = 0.25
#: Pending bytes that send a batch at once.
COMMIT_BYTES: Final = 4 * 1024 * 1024
#: The most bytes kept pending for all sessions (an outage's buffer).
MAX_PENDING_BYTES: Final = 64 * 1024 * 1024
#: How long one batch may take before it counts as not answered.
CALL_SECS: Final = 10.0
#: Pauses between tries while the store is unreachable.
RETRY_SECS: Final = (0.1, 0.2, 0.5, 1.0)
#: ``1``: the log is off (benchmarks' baseline only; module doc).
OFF_ENV: Final = "ACPGATE_BENCH_EVENT_LOG_OFF"
_REFUSED_FENCED: Final = "fenced"
_TURN_RUNNING: Final = "running"
#: How a batch that may not have arrived fails (it is sent again): no answer in time, the
#: service unreachable, or a stream broken mid-call (gRPC's ``UNKNOWN``).
_NOT_ANSWERED: Final = frozenset({Failure.UNAVAILABLE, Failure.DEADLINE, Failure.CANCELLED})
_UNKNOWN: Final = "UNKNOWN"


def now_ms() -> int:
    """Wall clock in milliseconds."""
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Part:
    """One session's pending events and turn marks, made under one claim generation."""

    holder: str
    generation: int
    #: Client actions: (event id, turn id, kind, payload, at).
    events: list[tuple[int, int, str, bytes, int]] = field(default_factory=list)
    #: Relayed events as the relay made them: (turn id, at, events, their characters),
    #: packed only when the batch is sent.
    relayed: list[tuple[int, int, Sequence[Event], int]] = field(default_factory=list)
    turns: list[tuple[int, str, int]] = field(default_factory=list)
    #: Chunks packed for a send that did not get through: sent again exactly so (the
    #: store skips a chunk it has by its first event id).
    packed: list[Chunk] = field(default_factory=list)
    size: int = 0

    def batch(self, session_id: str) -> EventBatch:
        """The part as one session's share of a send (its bytes are copied once, into the
        request itself); what was handed in is packed from now on."""
        packed = self.packed
        packed.extend((e, e, t, k, b"", p, at, FORM_LINES) for e, t, k, p, at in self.events)
        packed.extend(pack_relayed(self.relayed))
        self.events, self.relayed = [], []
        return EventBatch(session_id, self.holder, self.generation, packed, self.turns)

    def join(self, newer: _Part) -> None:
        """``newer`` (handed in after this part was taken) goes after it."""
        self.events.extend(newer.events)
        self.relayed.extend(newer.relayed)
        self.turns.extend(newer.turns)
        self.packed.extend(newer.packed)
        self.size += newer.size


class EventLog:
    """Group commit of the edge's sessions' events (module doc)."""

    def __init__(self, service: SessionBackend, fence: Callable[[str], tuple[str, int]],
                 on_fenced: Callable[[str], None], *, max_pending: int = MAX_PENDING_BYTES
                 ) -> None:
        self._service = service
        self._fence = fence
        self._on_fenced = on_fenced
        self._max_pending = max_pending
        #: (session id, generation) → its pending part, in the order they were opened.
        self._pending: dict[tuple[str, int], _Part] = {}
        self._size = 0
        #: Sessions whose log was lost here (past the bound): why.
        self.lost: dict[str, str] = {}
        #: Turns some of whose events a storage quota refused, by session: the sentence.
        self._over_quota: dict[str, dict[int, str]] = {}
        self._wake = asyncio.Event()
        #: Set when a part is opened: the sending loop sleeps on it while nothing is pending.
        self._opened = asyncio.Event()
        #: Times the sending loop woke (measurements and tests: none while nothing is pending).
        self.wakeups = 0
        #: How long recent batches took to commit (a running average, seconds).
        self.commit_secs = 0.0
        #: Count of events handed in, and of those acknowledged by the store.
        self._handed = 0
        self._durable = 0
        self._progress = asyncio.Condition()
        #: :meth:`settled` waiters: (the count of events they wait to be stored, set then).
        self._settling: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._task: asyncio.Task[None] | None = None
        #: Whether the last batch failed for want of a store (a retry is pending).
        self.unreachable = False
        #: The turns running in this process, by session (a session released while its
        #: turn still ends keeps it here until it has).
        self.running: dict[str, set[int]] = {}
        #: False only with :data:`OFF_ENV` set (module doc).
        self.enabled = os.environ.get(OFF_ENV, "") != "1"

    # ------------------------------------------------------------------ handing in

    def _part(self, session_id: str) -> _Part | None:
        if session_id in self.lost or not self.enabled:
            return None
        holder, generation = self._fence(session_id)
        key = (session_id, generation)
        part = self._pending.get(key)
        if part is None:
            part = self._pending[key] = _Part(holder, generation)
            self._opened.set()
        return part

    def _grew(self, session_id: str, part: _Part, size: int) -> None:
        part.size += size
        self._size += size
        self._handed += 1
        if self._size > self._max_pending:
            self._lose(session_id)
        elif self._size >= COMMIT_BYTES:
            self._wake.set()

    def updates(self, session_id: str, turn_id: int, events: Sequence[Event]) -> None:
        """Relayed ``events`` of ``session_id`` (turn ``turn_id``, 0 = between turns):
        kept as they are, sent with the next batch."""
        if not events or not self.enabled:
            return
        part = self._part(session_id)
        if part is None:
            return
        size = sum([len(e.line) for e in events])
        part.relayed.append((turn_id, now_ms(), events, size))
        self._grew(session_id, part, size)

    def action(self, session_id: str, event_id: int, turn_id: int, kind: str,
               payload: bytes) -> None:
        """A client action (or prompt) with its own event id."""
        part = self._part(session_id)
        if part is not None:
            part.events.append((event_id, turn_id, kind, payload, now_ms()))
            self._grew(session_id, part, len(payload))

    def turn(self, session_id: str, turn_id: int, state: str) -> None:
        """Turn ``turn_id`` of ``session_id`` is in ``state`` from now on."""
        if state == _TURN_RUNNING:
            self.running.setdefault(session_id, set()).add(turn_id)
        elif (mine := self.running.get(session_id)) is not None:
            mine.discard(turn_id)
            if not mine:
                del self.running[session_id]
        part = self._part(session_id)
        if part is not None:
            part.turns.append((turn_id, state, now_ms()))
            self._grew(session_id, part, 32)

    def _lose(self, session_id: str) -> None:
        """``session_id``'s events no longer fit: its pending ones are dropped, its log
        stops here (its running turn fails: :data:`~services.common.protocol.MSG_LOG_LOST`)."""
        for key in [k for k in self._pending if k[0] == session_id]:
            self._size -= self._pending.pop(key).size
        self.lost[session_id] = MSG_LOG_LOST
        log.error("event_log_lost", session_id=session_id, pending_bytes=self._size)

    def forget(self, session_id: str) -> None:
        """The session ended here: a later session under its id starts a fresh log."""
        self.lost.pop(session_id, None)
        self._over_quota.pop(session_id, None)

    def quota_refusal(self, session_id: str, turn_id: int) -> str:
        """The storage quota's sentence when events of turn ``turn_id`` were refused for
        it ("" when none was; asked once, after the turn's events were sent)."""
        turns = self._over_quota.get(session_id)
        why = turns.pop(turn_id, "") if turns else ""
        if turns is not None and not turns:
            del self._over_quota[session_id]
        return why

    def _refused_for_quota(self, session_id: str, part: _Part, why: str) -> None:
        turns = {chunk[2] for chunk in part.packed}  # every event of it was packed to send
        turns.discard(0)
        mine = self._over_quota.setdefault(session_id, {})
        for turn_id in turns:
            mine[turn_id] = why
        log.warning("event_log_over_quota", session_id=session_id, turns=len(turns))

    # ------------------------------------------------------------------ sending

    async def begin(self, instance_id: str, *, interrupt: bool = True) -> None:
        """Start sending batches, after the turns this instance's dead predecessor left
        running are marked interrupted (a store that cannot say is logged, not fatal) —
        unless ``interrupt`` is False: its sessions were re-adopted, their turns run on."""
        try:
            if interrupt:
                await self._service.interrupt_turns(instance_id=instance_id,
                                                    deadline_secs=CALL_SECS)
        except ServiceError as exc:
            log.warning("interrupt_turns_failed", code=exc.code)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="edge-event-log")

    async def close(self, wait_secs: float = 5.0) -> None:
        """Send what is pending (waiting at most ``wait_secs``), then stop."""
        with contextlib.suppress(TimeoutError):
            await self.flush(wait_secs)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def flush(self, wait_secs: float = 5.0) -> bool:
        """Wait until every event handed in so far is stored (True), or ``wait_secs``
        passed (False: the store is unreachable)."""
        target = self._handed
        if self._durable >= target:
            return True
        self._wake.set()
        try:
            async with asyncio.timeout(wait_secs), self._progress:
                await self._progress.wait_for(lambda: self._durable >= target)
        except TimeoutError:
            return False
        return True

    async def settled(self, session_id: str, wait_secs: float) -> bool:
        """Wait until every event handed in so far is stored (True), or ``wait_secs``
        passed (False). True at once when nothing would ever store them: the log off or
        not sending, ``session_id``'s log lost. Many waiters cost one future each, woken
        in order by the batch that stores their events (no lock handed round)."""
        target = self._handed
        if not self.enabled or self._task is None or self._task.done() \
                or session_id in self.lost or self._durable >= target:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settling.append((target, waiter))
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), wait_secs)
        except TimeoutError:
            return False
        finally:
            waiter.cancel()  # skipped when its turn comes (a no-op once it is set)
        return True

    def _wake_settled(self) -> None:
        """Set the :meth:`settled` waiters whose events are stored now (they were handed
        in in order, so they wait in order)."""
        settling = self._settling
        while settling and settling[0][0] <= self._durable:
            _, waiter = settling.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def wait_secs(self) -> float:
        """How long the next batch waits for more events: :data:`COMMIT_SECS` less what a
        commit takes now (module doc)."""
        return max(MIN_WAIT_SECS, COMMIT_SECS - self.commit_secs)

    async def _run(self) -> None:
        tries = 0
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:  # idle: no timer, the first part handed in wakes it
                self._opened.clear()
                await self._opened.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.wait_secs()):
                    await self._wake.wait()
            self._wake.clear()
            self.wakeups += 1
            if not self._pending:
                continue
            began = loop.time()
            if await self._send():
                took = loop.time() - began
                self.commit_secs += _COMMIT_WEIGHT * (took - self.commit_secs)
                tries = 0
            else:
                await asyncio.sleep(RETRY_SECS[min(tries, len(RETRY_SECS) - 1)])
                tries += 1

    async def _send(self) -> bool:
        """Send every pending part in one batch; False when the store did not answer
        (the parts stay pending, and are sent again)."""
        taken, handed = self._pending, self._handed
        self._pending = {}
        try:
            refused = await self._service.append_events(
                [part.batch(sid) for (sid, _), part in taken.items()], deadline_secs=CALL_SECS)
        except ServiceError as exc:
            if exc.kind in _NOT_ANSWERED or exc.code == _UNKNOWN:
                self._requeue(taken)
                if not self.unreachable:
                    log.warning("event_log_unreachable", code=exc.code,
                                pending_bytes=self._size)
                self.unreachable = True
                return False
            log.error("event_log_refused", code=exc.code, detail=exc.detail)
            refused = ["error"] * len(taken)
        if self.unreachable:
            log.info("event_log_reachable", pending_bytes=self._size)
        self.unreachable = False
        for ((sid, _), part), why in zip(taken.items(), refused, strict=False):
            self._size -= part.size
            if why == _REFUSED_FENCED:
                log.warning("event_log_fenced", session_id=sid, generation=part.generation)
                if self._fence(sid)[1] == part.generation:  # not a session served since
                    self._on_fenced(sid)
            elif why.startswith(REFUSED_QUOTA):
                self._refused_for_quota(sid, part, why.removeprefix(REFUSED_QUOTA))
            elif why:
                log.warning("event_log_part_refused", session_id=sid, why=why)
        async with self._progress:
            self._durable = max(self._durable, handed)
            self._progress.notify_all()
        self._wake_settled()
        return True

    def _requeue(self, taken: dict[tuple[str, int], _Part]) -> None:
        """Put parts not sent back before what was handed in meanwhile."""
        newer = self._pending
        self._pending = taken
        for key, part in newer.items():
            older = taken.get(key)
            if older is None:
                taken[key] = part
            else:
                older.join(part)
