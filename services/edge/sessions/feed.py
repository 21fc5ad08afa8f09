"""Every update relayed for a session, numbered, and the newest kept for exact replay.

Each ``session/update`` the edge relays for a live session gets the session's next
event id, carried in ``update._meta.acpgate.eventId`` (any ``_meta`` the agent sent
is kept; an ``acpgate.eventId`` there is overwritten, and an external agent's
``_meta.acpgate`` never gets this far: :mod:`services.edge.adapter.agent_meta`).
Message chunks the agent sent without a ``messageId`` get one (Message ID RFD): the
chunks of one kind that follow each other are one message, anything else in between
starts a new one.

A client resumes after an event id, or after a message id *acpgate* assigned
(``msg_<hex>``). An agent's own ``messageId`` is kept on the wire but is never a resume
point: the agent chooses it and may repeat it, so naming it would skip whatever the
agent streamed between — it is treated as a point the ring does not hold.

Ids increase for the whole life of the edge session and start from the wall clock
in microseconds, so a restored session's ids (a new incarnation) are above those of
the one before in practice, and stay below 2**53 (exact in every JSON reader).

:class:`SessionFeed` keeps the newest events in a ring bounded in events and in
characters (``[gateway] replay_chars``), and the rings of every session of the edge
together by one budget (:mod:`services.edge.sessions.ring_budget`): what a client that comes
back with the last event id it saw has missed is replayed from it, exactly — or, when
the ring no longer reaches back that far, the client is told to take the full
history instead. The events of the turn not yet stored are marked (``live_from``):
a full replay is the stored history followed by them.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from services.common.attach_protocol import MESSAGE_CHUNKS
from services.common.log_forms import TEXT_CHUNK_MID, TEXT_CHUNK_TAIL
from services.common.logs import CountedWarning, get_logger
from services.common.protocol import META_ACPGATE, META_EVENT_ID, U_AGENT_MESSAGE
from services.edge.adapter.relay_lines import RelayedUpdate, update_prefix
from services.edge.sessions.ring_budget import EVENT_OVERHEAD, RingBudget

__all__ = ["Event", "SessionFeed", "event_id_of"]

log = get_logger("edge.feed")

#: A text chunk line after its event id, and after its text (the event log rebuilds such
#: lines from their text: ``services.common.log_forms.text_chunk_line``).
_CHUNK_MID = TEXT_CHUNK_MID
_CHUNK_TAIL = TEXT_CHUNK_TAIL
#: The most events a ring holds, whatever their size (``replay_chars`` bounds it first).
MAX_EVENTS = 100_000
#: The highest event id there can be: the store keeps them as signed 64-bit integers.
MAX_EVENT_ID = 2**63 - 1
#: JSON's exact integers end at 2**53; ids start from the clock in microseconds (below it).
_CLOCK_SCALE = 1_000_000


@dataclass(slots=True)
class Event:
    """One relayed update as every client gets it."""

    event_id: int
    #: The whole ``session/update`` line.
    line: str
    #: The ``messageId`` of a message chunk ("" for other updates).
    message_id: str
    #: The connection that is not to get it (the prompter, of its ``prompt_received`` and
    #: ``turn_complete``), else None.
    not_for: object | None = None
    #: ``message_id`` is one acpgate assigned (a resume point), not the agent's own.
    assigned: bool = False
    #: An assistant text chunk read without parsing: its text, and its line's head (the
    #: line is ``text_chunk_line(head, event_id, text)``); None for any other update.
    text: str | None = None
    head: str = ""


def event_id_of(value: Any) -> int | None:
    """An event id a client passed (a number, or its decimal string), else None; one
    beyond :data:`MAX_EVENT_ID` is none (the store could not even be asked about it)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value <= MAX_EVENT_ID else None
    if isinstance(value, str) and value.isdigit() and len(value) < 20:
        return int(value) if int(value) <= MAX_EVENT_ID else None
    return None


class SessionFeed:
    """The numbered updates of one live session and the ring of the newest (module doc)."""

    def __init__(self, session_id: str, *, max_chars: int, max_events: int = MAX_EVENTS,
                 start_id: int | None = None, budget: RingBudget | None = None,
                 principal: str = "") -> None:
        self._sid = session_id
        #: Whose session it is: the budget's fairness is between principals first.
        self.principal = principal
        #: The edge's budget for every ring (None: this ring's own bounds only); the ring
        #: joins it with its first event and leaves it when the session ends (:meth:`close`).
        self._budget = budget
        self._prefix = update_prefix(session_id)
        self._next = start_id if start_id is not None else int(time.time() * _CLOCK_SCALE)
        #: The first event id of this incarnation (a replay of the log stops before it).
        self.first_id = self._next
        self._ring: deque[Event] = deque()
        self._chars = 0
        self._max_events = max(1, max_events)
        self._max_chars = max(1, max_chars)
        #: The first event id of the turn not stored yet (None between turns).
        self.live_from: int | None = None
        #: The message being streamed: its chunk kind, its id, and whether acpgate assigned it.
        self._message: tuple[str, str, bool] = ("", "", False)
        #: A text chunk line's head for one message id (:meth:`_chunk_head`).
        self._head: tuple[str, str] = ("", "")
        #: Events that fell out of the ring (what a late replay can no longer give).
        self.evicted = 0
        #: Updates dropped as unwritable (an agent's, nested too deep): counted, since a
        #: hostile agent sends them at will.
        self._dropped = CountedWarning(log, "update_dropped", session_id=session_id)

    # ------------------------------------------------------------------ numbering

    @property
    def last_id(self) -> int:
        """The newest event id given (one below the first, before any)."""
        return self._next - 1

    def reserve_id(self) -> int:
        """The next event id, for an event that is logged but not relayed (a prompt, a
        client's action): the ids stay one sequence."""
        event_id = self._next
        self._next += 1
        return event_id

    def turn_started(self) -> None:
        """A turn begins: its events are the live part of a full replay until it is stored."""
        self.live_from = self._next
        self._message = ("", "", False)

    def turn_stored(self) -> None:
        """The turn is in the store: a full replay reads it from there."""
        self.live_from = None

    def stamp(self, updates: Sequence[RelayedUpdate], lines: Sequence[str] | None,
              not_for: object | None = None) -> list[Event]:
        """Number ``updates`` (update objects, or an assistant text chunk's text) and keep
        them; ``lines`` are the same updates as the relay wrote them (the agent's bytes, when
        known, so an update is not encoded again), or None."""
        events: list[Event] = []
        for i, update in enumerate(updates):
            try:
                events.append(self._event(update, lines[i] if lines is not None else None,
                                          not_for))
            except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes (255)
                self._next -= 1  # its id was never given
                self._dropped(why=str(exc)[:200])
        self._keep(events)
        return events

    def _event(self, update: RelayedUpdate, line: str | None, not_for: object | None) -> Event:
        event_id = self._next
        self._next += 1
        if isinstance(update, str):  # an assistant text chunk read without parsing
            message_id, assigned = self._message_id(U_AGENT_MESSAGE, None)
            head = self._chunk_head(message_id)
            return Event(event_id, f'{head}{event_id}{_CHUNK_MID}{update}{_CHUNK_TAIL}',
                         message_id, not_for, assigned, update, head)
        kind = update.get("sessionUpdate")
        given: Any = update.get("messageId")
        message_id, assigned = "", False
        if kind in MESSAGE_CHUNKS:
            message_id, assigned = self._message_id(
                str(kind), given if isinstance(given, str) else None)
        else:
            self._message = ("", "", False)
        meta = update.get("_meta")
        raw = self._raw(line)
        if meta is None and raw is not None and len(update) > 0:
            # The agent's bytes with ours put first: no second encoding of the update.
            ours: dict[str, Any] = {"_meta": {META_ACPGATE: {META_EVENT_ID: event_id}}}
            if message_id and given is None:
                ours["messageId"] = message_id
            head = orjson.dumps(ours).decode()[:-1]
            return Event(event_id, self._prefix + head + "," + raw[1:] + "}}", message_id,
                         not_for, assigned)
        stamped = dict(update)
        own = dict(meta) if isinstance(meta, dict) else {}
        theirs = own.get(META_ACPGATE)
        own[META_ACPGATE] = {**(theirs if isinstance(theirs, dict) else {}),
                             META_EVENT_ID: event_id}
        stamped["_meta"] = own
        if message_id and given is None:
            stamped["messageId"] = message_id
        body = orjson.dumps(stamped).decode()
        return Event(event_id, self._prefix + body + "}}", message_id, not_for, assigned)

    def _chunk_head(self, message_id: str) -> str:
        """A text chunk's line up to its event id, for ``message_id`` (kept while the message
        streams: the common update is not encoded again)."""
        if self._head[0] != message_id:
            self._head = (message_id, f'{self._prefix}{{"sessionUpdate":"{U_AGENT_MESSAGE}",'
                          f'"messageId":{orjson.dumps(message_id).decode()},'
                          f'"_meta":{{"{META_ACPGATE}":{{"{META_EVENT_ID}":')
        return self._head[1]

    def _raw(self, line: str | None) -> str | None:
        """The update object's own bytes in a compact relayed line, else None."""
        if line is None or not line.startswith(self._prefix) or not line.endswith("}}"):
            return None
        raw = line[len(self._prefix):-2]
        return raw if raw.startswith("{") else None

    def _message_id(self, kind: str, given: str | None) -> tuple[str, bool]:
        """The message id of a chunk of ``kind`` (the agent's ``given`` one, else the current
        message's, else a fresh one of acpgate's) and whether acpgate assigned it."""
        if given:
            self._message = (kind, given, False)
            return given, False
        current_kind, current, assigned = self._message
        if current_kind == kind and current:
            return current, assigned
        fresh = f"msg_{uuid.uuid4().hex}"
        self._message = (kind, fresh, True)
        return fresh, True

    # ------------------------------------------------------------------ the ring

    def _keep(self, events: Iterable[Event]) -> None:
        ring = self._ring
        before_chars, before_len = self._chars, len(ring)
        chars = before_chars
        for event in events:
            ring.append(event)
            chars += len(event.line)
        while ring and (len(ring) > self._max_events or chars > self._max_chars):
            chars -= len(ring.popleft().line)
            self.evicted += 1
        self._chars = chars
        budget = self._budget
        if budget is not None:
            if not before_len:
                budget.join(self)
            figures = budget.metrics
            figures.replay_ring_chars += (chars - before_chars
                                          + (len(ring) - before_len) * EVENT_OVERHEAD)
            if figures.replay_ring_chars > budget.limit:
                budget.trim()

    @property
    def cost(self) -> int:
        """What the ring's events cost against the edge's budget: their characters and
        :data:`~services.edge.sessions.ring_budget.EVENT_OVERHEAD` each."""
        return self._chars + len(self._ring) * EVENT_OVERHEAD

    def trim_to(self, cost: int) -> int:
        """Drop the oldest events until the rest cost at most ``cost`` (the budget's trim);
        returns the cost dropped."""
        ring = self._ring
        dropped = 0
        while ring and self._chars + len(ring) * EVENT_OVERHEAD > cost:
            size = len(ring.popleft().line)
            self._chars -= size
            dropped += size + EVENT_OVERHEAD
            self.evicted += 1
        return dropped

    def close(self) -> None:
        """The session ended: its events are let go and no longer count in the budget."""
        if self._budget is not None:
            self._budget.leave(self)
            self._budget = None
        self._ring.clear()
        self._chars = 0

    @property
    def kept_chars(self) -> int:
        """The characters the ring holds now."""
        return self._chars

    def after(self, event_id: int) -> list[Event] | None:
        """The events after ``event_id``, oldest first; None when the ring no longer holds
        them all (the caller falls back to the full history) or the id was never given."""
        if event_id > self.last_id:
            return None
        if event_id == self.last_id:
            return []
        ring = self._ring
        if not ring or ring[0].event_id > event_id + 1:
            return None
        return [event for event in ring if event.event_id > event_id]

    def after_message(self, message_id: str) -> list[Event] | None:
        """The events after the last chunk of message ``message_id``, one acpgate assigned;
        None if the ring does not hold such a message."""
        for index in range(len(self._ring) - 1, -1, -1):
            event = self._ring[index]
            if event.message_id == message_id and event.assigned:
                return list(self._ring)[index + 1:]
        return None

    def after_point(self, point: Any) -> list[Event] | None:
        """The events after a client's resume point: an event id (a number, or its decimal
        string) or a message id acpgate assigned. None when the ring does not hold it — and
        for a message id an agent chose, which is never a resume point (module doc)."""
        if isinstance(point, str) and any(
                e.message_id == point and not e.assigned for e in self._ring):
            return None
        event_id = event_id_of(point)
        if event_id is not None:
            found = self.after(event_id)
            if found is not None:
                return found
        if isinstance(point, str) and point:
            return self.after_message(point)
        return None

    def held(self) -> list[Event]:
        """Every event the ring holds, oldest first."""
        return list(self._ring)

    def live_turn(self) -> list[Event] | None:
        """The events of the turn not stored yet ([] between turns); None when the ring lost
        part of them."""
        start = self.live_from
        if start is None:
            return []
        return self.after(start - 1)
