"""The session's event log in the store: records, checks and the statements both backends run.

Every update the edge relayed (with the event id its clients saw) and every client
action that changed the conversation is a row of ``events`` keyed by
``(session_id, event_id)``; each turn's state is a row of ``turns``. The edge sends
them in batches of many sessions (group commit); a batch is one transaction and each
session's part of it is fenced by the holder's claim generation, like a turn. Writing
an event that is already there does nothing, so a batch sent again (after an outage,
after a lost answer) never stores an event twice. A turn's final state is never
changed once set: a turn a restarted host marked ``interrupted`` stays so.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from services.session.store.records import Quota

__all__ = [
    "EVENT_KINDS", "FINAL_TURN_STATES", "MAX_EVENT_BYTES", "REFUSED_FENCED",
    "REFUSED_NOT_FOUND", "TURN_INTERRUPTED", "TURN_RUNNING", "TURN_STATES", "EventLogStore",
    "LoggedEvent", "SessionBatch", "TurnMark", "batch_problem",
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


def batch_problem(batch: SessionBatch) -> str:
    """Why ``batch`` cannot be written ("" when it can): a check made before any write, so a
    part is written whole or not at all."""
    if not batch.session_id or "\x00" in batch.session_id:
        return "invalid: empty session id"
    for event in batch.events:
        if event.kind not in EVENT_KINDS:
            return f"invalid: unknown event kind {event.kind[:40]!r}"
        if not 0 < event.event_id < _MAX_ID or not 0 <= event.turn_id < _MAX_ID:
            return "invalid: event id out of range"
        if len(event.payload) > MAX_EVENT_BYTES:
            return "invalid: event too large"
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
    "SELECT active_instance_id, claim_generation, stored_bytes, owner_session_key"
    " FROM sessions WHERE id = ?")
INSERT_EVENT: Final = (
    "INSERT INTO events (session_id, event_id, turn_id, kind, payload, at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, event_id) DO NOTHING")
#: A turn starts running (a second start of the same turn changes nothing).
START_TURN: Final = (
    "INSERT INTO turns (session_id, turn_id, state, instance_id, started_at)"
    " VALUES (?, ?, 'running', ?, ?) ON CONFLICT (session_id, turn_id) DO NOTHING")
#: A turn ends: only a running one changes (a final state is kept).
END_TURN: Final = (
    "INSERT INTO turns (session_id, turn_id, state, instance_id, started_at, ended_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, turn_id) DO UPDATE"
    " SET state = excluded.state, ended_at = excluded.ended_at WHERE turns.state = 'running'")
#: The first history turn the log covers, set by the session's first logged batch.
MARK_LOG_START: Final = (
    "UPDATE sessions SET log_from_turn = last_turn + 1 WHERE id = ? AND log_from_turn = 0")
SELECT_LOG_START: Final = "SELECT log_from_turn FROM sessions WHERE id = ?"
SELECT_EVENTS: Final = (
    "SELECT event_id, turn_id, kind, payload, at FROM events WHERE session_id = ?"
    " AND event_id > ? AND event_id < ? ORDER BY event_id LIMIT ?")
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
#: No upper bound on the event ids read.
NO_BOUND: Final = _MAX_ID


class EventLogStore(ABC):
    """What a store does with the event log (module doc)."""

    @abstractmethod
    async def append_events(self, batches: Sequence[SessionBatch], *,
                            quota: Quota | None = None) -> list[str]:
        """Write ``batches`` in one transaction; per batch, "" (written) or why it was not
        (:data:`REFUSED_FENCED`, :data:`REFUSED_NOT_FOUND`, "invalid: ...", or over
        ``quota``: ``log_quota.REFUSED_QUOTA`` and the quota's sentence), in order. The
        events' payload bytes count against ``quota`` like history (:mod:`.log_quota`)."""

    @abstractmethod
    def iter_events(self, session_id: str, *, after: int = 0, before: int = 0,
                    page: int = EVENT_PAGE) -> AsyncIterator[list[LoggedEvent]]:
        """The logged events of ``session_id`` with ``after < event_id < before`` (0: no
        upper bound), oldest first, in pages of at most ``page``."""

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
