"""A replay read from the session's event log (``ReadEvents``), page by page.

What a client saw is replayed as it saw it: each logged update's line as it was
relayed (with its event id), each prompt as a ``user_message_chunk`` — marked with
``_meta.acpgate.stopReason`` when its turn ended cancelled or interrupted. A session
older than its log (or a fork) first gets the stored history of the turns before the
log began, as :class:`~services.edge.sessions.history_wire.Replay` renders it.

Before reading, the edge's pending events are written (:meth:`EventLog.flush`), so
what this host relayed is in what is read; a session none of whose turns runs in this
process has its running turns in the store marked interrupted first (a dead process
left them so).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Final

from services.common.jsonrpc import notification_lines
from services.common.logs import get_logger
from services.common.protocol import M_SESSION_UPDATE
from services.edge.backends.errors import ServiceError
from services.edge.errors import service_error
from services.edge.sessions.history_wire import Replay

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["REPLAYED_KINDS", "read_log_lines", "replay_log"]

log = get_logger("edge.log_replay")

#: The logged events a replay sends (the client's other actions are not updates).
REPLAYED_KINDS: Final = frozenset({"update", "prompt"})
#: Lines handed to the client per send (other sessions on the connection get a turn).
_CHUNK: Final = 500
#: How long a replay waits for the edge's pending events to be stored.
_FLUSH_SECS: Final = 5.0

Send = Callable[[list[str]], Awaitable[None]]


async def replay_log(send: Send, session: EdgeSession, *, after: int = 0, before: int = 0,
                     with_history: bool = True) -> None:
    """Send ``session``'s log with ``after < event id < before`` (0: unbounded) — with
    ``with_history``, after the history stored before the log began (module doc)."""
    rt = session.runtime
    sid = session.session_id
    if not await rt.event_log.flush(_FLUSH_SECS):
        log.warning("replay_unflushed", session_id=sid)
    try:
        if not rt.event_log.running.get(sid):  # no turn of it ends here: a dead host's
            await rt.session_service.interrupt_turns(session_id=sid)
    except ServiceError as exc:
        raise service_error(exc, sid) from None
    builtin = session.adapter is not None and session.adapter.builtin
    replay = Replay(sid if builtin else "")
    pages = rt.session_service.read_events(sid, after_event_id=after, before_event_id=before,
                                           with_history=with_history)
    try:
        async for page in pages:
            lines: list[str] = []
            if page.items:
                lines = _update_lines(sid, replay.updates(page.items))
            if page.events:
                lines += _update_lines(sid, replay.finish())
                lines += [e.payload.decode(errors="replace") for e in page.events
                          if e.kind in REPLAYED_KINDS]
            for start in range(0, len(lines), _CHUNK):
                await send(lines[start:start + _CHUNK])
        if tail := _update_lines(sid, replay.finish()):
            await send(tail)
    except ServiceError as exc:
        raise service_error(exc, sid) from None
    finally:
        await pages.aclose()


def _update_lines(sid: str, updates: list[dict[str, object]]) -> list[str]:
    return notification_lines(M_SESSION_UPDATE, [{"sessionId": sid, "update": u}
                                                 for u in updates])


async def read_log_lines(rt: Any, sid: str, after: int, before: int
                         ) -> AsyncIterator[list[str]]:
    """The replayed lines of ``sid``'s log with ``after < event id < before``, page by page,
    once the edge's pending events are stored (a Streamable HTTP stream's gap)."""
    if not await rt.event_log.flush(_FLUSH_SECS):
        log.warning("replay_unflushed", session_id=sid)
    async with aclosing(rt.session_service.read_events(
            sid, after_event_id=after, before_event_id=before)) as pages:
        async for page in pages:
            lines = [e.payload.decode(errors="replace") for e in page.events
                     if e.kind in REPLAYED_KINDS]
            if lines:
                yield lines
