"""What each session this edge serves is doing, as its heartbeat reports it.

The session service keeps every instance's latest report in memory
(``ReportActivity``) and hands it to operators with the live sessions
(``ListLiveSessions``, ``acpgate ps``): the edge alone knows whether a turn runs
or waits for the client's answer. Reported, per session: being set up, idle, a
turn running, or a turn waiting for the client (permission requests and
elicitations open), with the session's last activity and its lease, and whether a
many clients are attached: a session whose connections went waits detached for its
owner's next one — then none is; otherwise its connection and every
client that joined it with ``session/attach`` (observers included).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from services.edge.backends.session_types import (
    ACTIVITY_IDLE,
    ACTIVITY_SETTING_UP,
    ACTIVITY_TURN,
    ACTIVITY_WAITING,
    SessionActivity,
)

__all__ = ["Reported", "Shape", "activity_of", "changed", "setting_up", "shape", "shape_of"]

#: What an operator sees of a session, less its last-activity time: (id, state, questions
#: open, lease, detached, clients attached). A report goes out when these change.
Shape = tuple[str, int, int, str, bool, int]


class _Clients(Protocol):
    def count(self) -> int:
        """The clients attached now."""


class Reported(Protocol):
    """What a report reads of a live session (an ``EdgeSession``): its id and lease, its
    running turn, whether and how many clients are attached, how long it has been idle (and
    its questions to the client still open, kept as ``_relays``)."""

    @property
    def session_id(self) -> str:
        """The session's id."""

    @property
    def lease_id(self) -> str:
        """Its adapter's lease."""

    @property
    def turn(self) -> object | None:
        """The running turn, if any."""

    @property
    def attached(self) -> asyncio.Event:
        """Set while a client connection is attached."""

    @property
    def clients(self) -> _Clients:
        """Its attached clients."""

    def idle_for(self) -> float:
        """Seconds since its last activity."""


def setting_up(session_id: str) -> SessionActivity:
    """A session being created or restored here (no adapter bound yet)."""
    return SessionActivity(session_id=session_id, state=ACTIVITY_SETTING_UP,
                           last_activity=int(time.time() * 1000))


def shape_of(session: Reported) -> Shape:
    """What an operator sees of ``session`` right now, less its last-activity time (no
    report built: the heartbeat compares these between its reports)."""
    # The questions to its client still open (EdgeSession keeps each relay's waiter).
    waiting = len(getattr(session, "_relays", ()))
    if session.turn is None:
        state = ACTIVITY_IDLE
    elif waiting:
        state = ACTIVITY_WAITING
    else:
        state = ACTIVITY_TURN
    detached = not session.attached.is_set()
    return (session.session_id, state, waiting, session.lease_id, detached,
            0 if detached else session.clients.count())


def activity_of(session: Reported) -> SessionActivity:
    """What ``session`` is doing right now."""
    sid, state, waiting, lease_id, detached, clients = shape_of(session)
    return SessionActivity(
        session_id=sid, state=state, waiting_requests=waiting,
        last_activity=int((time.time() - session.idle_for()) * 1000),
        lease_id=lease_id, detached=detached, attached_clients=clients)


def shape(activity: Iterable[SessionActivity]) -> set[Shape]:
    """The shapes of ``activity`` (what :func:`changed` compares)."""
    return {(a.session_id, a.state, a.waiting_requests, a.lease_id, a.detached,
             a.attached_clients) for a in activity}


def changed(before: Mapping[str, SessionActivity] | None,
            now: Mapping[str, SessionActivity]) -> bool:
    """Whether anything an operator sees changed (not the last-activity time, which every
    streamed update moves)."""
    return before is None or shape(before.values()) != shape(now.values())
