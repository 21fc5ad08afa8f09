"""The session's event log in the store: records, checks and the statements both backends run.

Every update the edge relayed (with the event id its clients saw) and every client
action that changed the conversation is logged; each turn's state is a row of
``turns``. Events are stored in chunks (:class:`EventChunk`): a row of ``event_chunks``
holds the events of consecutive ids ``first_event_id..last_event_id`` of one turn and
kind, their payloads joined by a newline — what the edge relayed in one commit window
is one row, not one per update; a client action is a chunk of one. Reads split them:
a reader gets the same events, one by one, as if each had a row. The edge sends them
in batches of many sessions (group commit); a batch is one transaction and each
session's part of it is fenced by the holder's claim generation, like a turn. Writing
a chunk that is already there (its first event id) does nothing — the edge sends a
chunk again with the same bounds — so a batch sent again (after an outage, after a
lost answer) never stores an event twice. A turn's final state is never changed once
set: a turn a restarted host marked ``interrupted`` stays so.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from services.common.log_forms import FORM_LINES, FORM_TEXT_CHUNKS, FORMS, text_chunk_lines
from services.session.store.records import Quota

__all__ = [
    "EVENT_KINDS", "FINAL_TURN_STATES", "MAX_EVENT_BYTES", "REFUSED_FENCED",
    "REFUSED_NOT_FOUND", "TURN_INTERRUPTED", "TURN_RUNNING", "TURN_STATES", "EventChunk",
    "EventLogStore", "LoggedEvent", "SessionBatch", "TurnMark", "batch_problem", "chunk_of", "read_chunks",
    "read_pages",
]

#: What a logged event is: an update as relayed, or one of the client's actions.
EVENT_KINDS: Final = frozenset({"update", "prompt", "permission", "config", "cancel"})
TURN_RUNNING: Final = "running"
TURN_INTERRUPTED: Final = "interrupted"
#: A turn's final states (set once, never changed after).
FINAL_TURN_STATES: Final = frozenset({"completed", "cancelled", "failed", TURN_INTERRUPTED})
TURN_STATES: Final = FINAL_TURN_STATES | {TURN_RUNNING}
#: The largest payload one event may have (a relayed line is bounded far below it).
MAX_EVENT_BYTES: Final = 64 * 1024 * 1024
#: Why a session's part of a batch was not written.
REFUSED_FENCED: Final = "fenced"
REFUSED_NOT_FOUND: Final = "not_found"
#: JSON's exact integers end at 2**53: an event id past it is refused.
_MAX_ID: Final = 2**53


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One event of a session's log."""

    event_id: int
    turn_id: int
    kind: str
    payload: bytes
    at: int


#: What joins the payloads of a chunk's events (a logged line holds no raw newline).
CHUNK_SEPARATOR: Final = b"\n"


@dataclass(frozen=True, slots=True)
class EventChunk:
    """Events of consecutive ids ``first..last``, of one turn and one kind, as one record:
    ``payload`` is their parts joined by :data:`CHUNK_SEPARATOR` (a chunk of one event:
    the rest of its payload as it is, whatever bytes it holds); ``form`` says how a part
    makes the event's payload (:mod:`services.common.log_forms`): ``prefix`` followed by
    it, or the text chunk line of ``prefix`` (its head), the event id and the part."""

    first: int
    last: int
    turn_id: int
    kind: str
    payload: bytes
    #: When its first event was handed to the log (ms).
    at: int
    prefix: bytes = b""
    form: int = FORM_LINES

    @classmethod
    def of(cls, event: LoggedEvent) -> EventChunk:
        """``event`` alone."""
        return cls(event.event_id, event.event_id, event.turn_id, event.kind, event.payload,
                   event.at)

    def parts(self) -> list[bytes]:
        """Each event's part of the payload, oldest first."""
        return [self.payload] if self.last == self.first else \
            self.payload.split(CHUNK_SEPARATOR)

    def within(self, seen: int, bound: int) -> EventChunk | None:
        """The chunk of its events with ``seen < event_id < bound`` (itself when all are;
        None when none is)."""
        low, high = max(self.first, seen + 1), min(self.last, bound - 1)
        if low > high:
            return None
        if (low, high) == (self.first, self.last):
            return self
        kept = self.parts()[low - self.first:high - self.first + 1]
        return EventChunk(low, high, self.turn_id, self.kind, CHUNK_SEPARATOR.join(kept),
                          self.at, self.prefix, self.form)

    def texts(self) -> list[str] | None:
        """The texts of its events when each is an assistant text chunk
        (:data:`~services.common.log_forms.FORM_TEXT_CHUNKS`: the part is the text as it
        is), without rebuilding their lines; None for another form, or a part that is not
        UTF-8 (its line would not parse either)."""
        if self.form != FORM_TEXT_CHUNKS:
            return None
        try:
            return [part.decode() for part in self.parts()]
        except UnicodeDecodeError:
            return None

    def split(self) -> list[LoggedEvent]:
        """Its events, oldest first."""
        first, turn_id, kind, at, prefix = self.first, self.turn_id, self.kind, self.at, \
            self.prefix
        parts = self.parts()
        if self.form == FORM_TEXT_CHUNKS:
            payloads = text_chunk_lines(prefix, first, parts)
        else:
            payloads = [prefix + part for part in parts]
        return [LoggedEvent(first + i, turn_id, kind, payload, at)
                for i, payload in enumerate(payloads)]


@dataclass(frozen=True, slots=True)
class TurnMark:
    """A turn's state from ``at`` on."""

    turn_id: int
    state: str
    at: int


@dataclass(slots=True)
class SessionBatch:
    """One session's part of a batch: its events and turn marks, fenced by its holder."""

    session_id: str
    events: Sequence[LoggedEvent] = ()
    turns: Sequence[TurnMark] = ()
    holder: str | None = None
    generation: int = 0
    #: Set by the store: why nothing of it was written ("" = written).
    refused: str = field(default="")
    #: Events already packed in chunks (the edge's), written beside ``events``.
    chunks: Sequence[EventChunk] = ()

    def rows(self) -> list[EventChunk]:
        """Every chunk to write: ``chunks``, then each of ``events`` as a chunk of one."""
        return [*self.chunks, *map(EventChunk.of, self.events)]


def batch_problem(batch: SessionBatch) -> str:
    """Why ``batch`` cannot be written ("" when it can): a check made before any write, so a
    part is written whole or not at all."""
    if not batch.session_id or "\x00" in batch.session_id:
        return "invalid: empty session id"
    for chunk in batch.rows():
        if chunk.kind not in EVENT_KINDS:
            return f"invalid: unknown event kind {chunk.kind[:40]!r}"
        if not 0 < chunk.first <= chunk.last < _MAX_ID or not 0 <= chunk.turn_id < _MAX_ID:
            return "invalid: event id out of range"
        if len(chunk.payload) + len(chunk.prefix) > MAX_EVENT_BYTES:
            return "invalid: event too large"
        if chunk.last > chunk.first and \
                chunk.payload.count(CHUNK_SEPARATOR) != chunk.last - chunk.first:
            return "invalid: a chunk's payloads do not match its event ids"
        if chunk.form not in FORMS or (chunk.form != FORM_LINES and chunk.kind != "update"):
            return "invalid: unknown chunk form"
    for mark in batch.turns:
        if mark.state not in TURN_STATES:
            return f"invalid: unknown turn state {mark.state[:40]!r}"
        if not 0 < mark.turn_id < _MAX_ID:
            return "invalid: turn id out of range"
    return ""


def held_by(holder: str | None, generation: int, instance: str, claim_generation: int) -> bool:
    """Whether a write of ``holder`` at ``generation`` passes the row's claim: as a turn's
    fence (``check_fence``), and also once the holder released that claim (the last events
    of a session that ends arrive after its release), or took a newer one itself (it
    restored the session meanwhile) — a claim another instance took since refuses it."""
    if holder is None:
        return True
    if generation:
        if instance == holder:
            return generation <= claim_generation
        return instance == "" and claim_generation == generation
    return instance in ("", holder)


#: A session's claim, for the fence (parameter: the session id).
SELECT_LOG_TARGET: Final = (
    "SELECT active_instance_id, claim_generation, stored_bytes, owner_session_key,"
    " log_from_turn FROM sessions WHERE id = ?")
INSERT_CHUNK: Final = (
    "INSERT INTO event_chunks (session_id, first_event_id, last_event_id, turn_id, kind,"
    " prefix, payload, at, form) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, first_event_id) DO NOTHING")
#: A turn starts running (a second start of the same turn changes nothing).
START_TURN: Final = (
    "INSERT INTO turns (session_id, turn_id, state, instance_id, started_at)"
    " VALUES (?, ?, 'running', ?, ?) ON CONFLICT (session_id, turn_id) DO NOTHING")
#: A turn ends: only a running one changes (a final state is kept).
END_TURN: Final = (
    "INSERT INTO turns (session_id, turn_id, state, instance_id, started_at, ended_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, turn_id) DO UPDATE"
    " SET state = excluded.state, ended_at = excluded.ended_at WHERE turns.state = 'running'")
#: The first history turn the log covers, set by the session's first logged batch (run
#: only while the row's ``log_from_turn`` is 0).
MARK_LOG_START: Final = (
    "UPDATE sessions SET log_from_turn = last_turn + 1 WHERE id = ? AND log_from_turn = 0")
SELECT_LOG_START: Final = "SELECT log_from_turn FROM sessions WHERE id = ?"
#: The chunks holding events with ``after < event_id < before``, oldest first: from the
#: one that starts at or below ``after`` (chunks never overlap), both bounds on the key
#: (parameters: session id, session id, after, after, before, limit).
SELECT_CHUNKS: Final = (
    "SELECT first_event_id, last_event_id, turn_id, kind, payload, at, prefix, form"
    " FROM event_chunks"
    " WHERE session_id = ? AND first_event_id >= (SELECT coalesce(max(first_event_id), 0)"
    " FROM event_chunks WHERE session_id = ? AND first_event_id <= ?)"
    " AND last_event_id > ? AND first_event_id < ? ORDER BY first_event_id LIMIT ?")
SELECT_TURN_STATES: Final = "SELECT turn_id, state FROM turns WHERE session_id = ?"
#: Running turns of one session → interrupted (parameters: now, session id).
INTERRUPT_SESSION: Final = (
    "UPDATE turns SET state = 'interrupted', ended_at = ?"
    " WHERE session_id = ? AND state = 'running'")
#: Running turns left by an instance (its own id) or of sessions nobody holds a live claim
#: on → interrupted (parameters: now, instance id, now).
INTERRUPT_ORPHANS: Final = (
    "UPDATE turns SET state = 'interrupted', ended_at = ? WHERE state = 'running'"
    " AND (instance_id = ? OR session_id IN (SELECT id FROM sessions"
    " WHERE active_instance_id = '' OR active_until < ?))")
#: Events read per page.
EVENT_PAGE: Final = 500
#: Chunks read per query (the edge cuts a chunk near 256 KiB of lines: a query stays a few MiB).
CHUNK_PAGE: Final = 32
#: No upper bound on the event ids read.
NO_BOUND: Final = _MAX_ID


def chunk_of(row: Any) -> EventChunk:
    """A :data:`SELECT_CHUNKS` row (a tuple, or a PostgreSQL record)."""
    first, last, turn_id, kind, payload, at, prefix, form = row
    return EventChunk(int(first), int(last), int(turn_id), str(kind), bytes(payload), int(at),
                      bytes(prefix), int(form))


async def read_chunks(fetch: Callable[[int, int], Awaitable[list[EventChunk]]], after: int,
                      before: int) -> AsyncIterator[list[EventChunk]]:
    """The chunks of the events with ``after < event_id < before`` (0: no bound), cut to
    those bounds, oldest first, as ``fetch(after, before)`` reads them (:data:`CHUNK_PAGE`
    at a time). An event id is given once, whatever the chunks hold."""
    bound = before or NO_BOUND
    seen, cursor = after, after
    while True:
        chunks = await fetch(cursor, bound)
        kept = []
        for chunk in chunks:
            part = chunk.within(seen, bound)
            if part is not None:
                kept.append(part)
                seen = part.last
        if kept:
            yield kept
        if len(chunks) < CHUNK_PAGE or seen + 1 >= bound:
            break
        cursor = max(cursor, chunks[-1].last)


async def read_pages(fetch: Callable[[int, int], Awaitable[list[EventChunk]]], after: int,
                     before: int, page: int) -> AsyncIterator[list[LoggedEvent]]:
    """The events with ``after < event_id < before`` (0: no bound) in pages of ``page``
    (the last one shorter), oldest first: :func:`read_chunks`, split."""
    pending: list[LoggedEvent] = []
    async for chunks in read_chunks(fetch, after, before):
        for chunk in chunks:
            pending.extend(chunk.split())
        while len(pending) >= page:
            yield pending[:page]
            pending = pending[page:]
    if pending:
        yield pending


class EventLogStore(ABC):
    """What a store does with the event log (module doc)."""

    @abstractmethod
    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
        """Write ``batches`` in one transaction; per batch, "" (written) or why it was not
        (:data:`REFUSED_FENCED`, :data:`REFUSED_NOT_FOUND`, "invalid: ...", or over
        ``quota``: ``log_quota.REFUSED_QUOTA`` and the quota's sentence), in order. The
        bytes its rows keep count against ``quota`` like history (:mod:`.log_quota`)."""

    @abstractmethod
    def iter_events(self, session_id: str, *, after: int = 0, before: int = 0,
                    page: int = EVENT_PAGE) -> AsyncIterator[list[LoggedEvent]]:
        """The logged events of ``session_id`` with ``after < event_id < before`` (0: no
        upper bound), oldest first, in pages of at most ``page``."""

    @abstractmethod
    def iter_chunks(self, session_id: str, *, after: int = 0, before: int = 0
                    ) -> AsyncIterator[list[EventChunk]]:
        """:meth:`iter_events` as the chunks that hold them (cut to the bounds), for a
        reader that takes a chunk whole."""

    @abstractmethod
    async def turn_states(self, session_id: str) -> dict[int, str]:
        """Every logged turn of ``session_id`` and its state."""

    @abstractmethod
    async def log_start(self, session_id: str) -> int:
        """The first history turn the log covers (0: nothing logged; SessionNotFound)."""

    @abstractmethod
    async def interrupt_turns(self, *, instance_id: str = "", session_id: str = "") -> int:
        """Mark running turns interrupted: ``session_id``'s, else those ``instance_id`` left
        and those of sessions without a live claim; how many."""
