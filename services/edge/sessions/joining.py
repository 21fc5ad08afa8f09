"""A client connection joins a live session: what it has not seen, then the live tail.

:func:`join` attaches a connection (``session/attach``, or a ``session/load`` /
``session/resume`` of a detached session) and replays, by its history policy:

- ``after_message``: the ring's events after the given event id (or after the last
  chunk of the given message id, one acpgate assigned: an agent's own ``messageId`` is
  not a resume point) — exactly what the client has not seen. When the ring no longer
  reaches back to an event id, the session's log in the store gives what lies between
  it and the ring's oldest event (the edge's pending events written first), then the
  ring — an event id of an earlier incarnation of the session too. Only a point neither
  holds (a message id the ring lost, an id never given, a store that cannot be written)
  falls back (``full`` for ``session/attach``, as the RFD says; the live turn for a
  resume);
- ``full``: the stored history (read under the session's ``storing`` lock, so a turn
  being stored meanwhile is either in what is read or in the live part, never in both)
  followed by the live turn's events;
- ``none`` / ``pending_only``: nothing (a pending permission request is asked of a new
  controller either way).

The connection's attachment is entered into the session before the replay is read and
holds back what the session streams meanwhile in its queue; its writer starts once the
replay went out: no gap, no duplicate, in order. A caller that ends the replay with lines
of its own (a v2 resume's ``replay_complete`` and current state) passes them as ``then``:
they are made and sent once what was held back went out too, so what they say of the
session is true of everything sent before them.

A connection attached to the session already (as its holder, or with an earlier
``session/attach``) joins again the same way: its new attachment takes the old one's
place in the same step (:func:`_enter`), so the session never lacks it and a
permission request it was asked stays open on it (the request is the connection's).
A holder that joins again as an observer hands the session to another controller
attached, else detaches it for the grace (:func:`may_rejoin` says when it cannot).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from services.common.attach_protocol import (
    HISTORY_AFTER_MESSAGE,
    HISTORY_FULL,
    ROLE_CONTROLLER,
)
from services.common.logs import get_logger
from services.edge.sessions.clients import (
    AttachedConnection,
    Attachment,
    DetachedPort,
    attach,
    changed,
    conn_of,
    detach,
    promote,
)
from services.edge.sessions.feed import Event, event_id_of
from services.edge.sessions.log_replay import replay_log

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["HISTORY_LIVE", "join", "may_rejoin"]

log = get_logger("edge.joining")

#: A resume's fallback: the live turn's events only (its client holds the stored history).
HISTORY_LIVE = "live"
#: How long a replay from the log waits for the edge's pending events to be stored.
_FLUSH_SECS = 5.0


async def join(session: EdgeSession, conn: AttachedConnection, *, role: str, policy: str,
               after: Any = None, fallback: str = HISTORY_FULL,
               send_history: Callable[[], Awaitable[None]] | None = None,
               then: Callable[[], list[str]] | None = None) -> str:
    """Attach ``conn`` to ``session`` as ``role`` and replay by ``policy`` (module doc);
    ``send_history`` sends the stored history (``full``); ``then`` makes the lines that end
    the replay, after what the session streamed during it. Returns the policy applied."""
    att = Attachment(session.clients, conn, role,
                     session.runtime.cfg.gateway.attach_queue_chars)
    feed = session.feed
    applied = policy
    events: list[Event] = []
    from_log: int | None = None
    if policy == HISTORY_AFTER_MESSAGE:
        found = feed.after_point(after)
        if found is not None:
            events = found
        elif (from_log := await _logged_point(session, after)) is None:
            applied = fallback
            log.info("replay_fallback", session_id=session.session_id, to=fallback)
    if from_log is not None:  # the store up to the ring's oldest event, then the ring
        log.info("replay_from_log", session_id=session.session_id, after=from_log)
        events = [e for e in feed.held() if e.event_id > from_log]
        snapshot = feed.last_id
        _enter(session, att)
        await replay_log(conn.send_many, session, after=from_log, with_history=False,
                         before=events[0].event_id if events else snapshot + 1)
    elif applied in (HISTORY_FULL, HISTORY_LIVE):
        async with session.storing:
            live = feed.live_turn()
            if live is None:  # the ring lost the live turn's oldest events: what it holds
                log.warning("replay_incomplete", session_id=session.session_id,
                            evicted=feed.evicted)
                live = feed.held()
            events = live
            snapshot = feed.last_id
            _enter(session, att)
            if applied == HISTORY_FULL and send_history is not None:
                await send_history()
    else:
        snapshot = feed.last_id
        _enter(session, att)
    lines = [e.line for e in events]
    if lines:
        await conn.send_many(lines)
    att.delivered = max(att.delivered, snapshot)
    if then is not None:
        await att.flush()
        if tail := then():  # made now: nothing is queued behind the replay
            await conn.send_many(tail)
    att.start()
    changed(session)  # a pending permission request is asked of a new controller now
    return applied


async def _logged_point(session: EdgeSession, after: Any) -> int | None:
    """``after`` as an event id the session's log is read after (module doc), once the
    edge's pending events are stored; None when it is no such point."""
    event_id = event_id_of(after)
    if event_id is None or not 0 <= event_id < session.feed.last_id:
        return None
    if not await session.runtime.event_log.flush(_FLUSH_SECS):
        log.warning("replay_log_unflushed", session_id=session.session_id)
        return None
    return event_id


def _heir(session: EdgeSession, conn: object) -> Attachment | None:
    """A controller attached to ``session`` on a connection other than ``conn``."""
    return next((a for a in session.clients.extra if a.role == ROLE_CONTROLLER
                 and not a.closed and a.conn is not conn), None)


def may_rejoin(session: EdgeSession, conn: AttachedConnection, role: str) -> bool:
    """Whether ``conn`` may join ``session`` again as ``role``: not when it holds the
    session, would watch it only, and nobody could hold it meanwhile (no other controller
    attached, no grace to detach it for: stdio)."""
    return role == ROLE_CONTROLLER or conn_of(session.port) is not conn \
        or _heir(session, conn) is not None or conn.detach_grace_secs > 0


def _enter(session: EdgeSession, att: Attachment) -> None:
    """Enter ``att`` into the session: a controller of a detached session becomes its
    port; any other attachment joins the ones there. An attachment of the same connection
    (a join again) is taken out in the same step: a controller holding the session is
    replaced as its port, one that becomes an observer hands it on (module doc)."""
    clients = session.clients
    for old in [a for a in clients.extra if a.conn is att.conn]:
        old.close()
        clients.extra.remove(old)
    port = session.port
    if conn_of(port) is att.conn:
        if isinstance(port, Attachment):
            port.close()
        if att.role == ROLE_CONTROLLER:
            attach(session, att)
            return
        heir = _heir(session, att.conn)
        if heir is not None:
            clients.extra.remove(heir)
            promote(session, heir)
        else:
            detach(session, att.detach_grace_secs, delivered=clients.delivered_to(port))
    if att.role == ROLE_CONTROLLER and isinstance(session.port, DetachedPort):
        attach(session, att)
    else:
        clients.extra.append(att)
