"""Room for a token's next session, made by letting its detached idle sessions go.

Each token's share of the session slots is counted in :mod:`services.edge.sessions.registry`
(:class:`~services.edge.sessions.registry.TokenShares`). A session whose client connection went waits detached for
``[gateway] detach_grace_secs`` (:mod:`services.edge.sessions.clients`) and keeps
its slot. When its principal's next session would pass the share or the host's
limit, the principal's detached *idle* sessions (no turn running, so no permission
request pending either) go first, the longest detached first, released exactly as the
end of the grace releases them (the row stays, loadable). Only the principal's own:
another token's sessions are never let go to make room for it, and a detached session
running a turn keeps its slot. With several edge workers, the session service counts
the slots: each worker reports its releasable sessions (:func:`releasable_picture`) and
releases those the service orders (:func:`release_ordered`) for a take refused on
another worker (``services.session.live.worker_ledger``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

from services.common.logs import get_logger
from services.edge.backends.session_types import SLOT_SESSION_RELEASABLE
from services.edge.sessions.clients import DetachedPort

if TYPE_CHECKING:
    from services.edge.sessions.hub import EdgeHub
    from services.edge.sessions.registry import SessionRegistry
    from services.edge.sessions.session import EdgeSession

__all__ = ["detached_idle", "let_go_for_room", "releasable_picture",
           "release_ordered"]

log = get_logger("edge.shares")


def detached_idle(session: EdgeSession) -> bool:
    """Whether ``session`` waits detached with nothing running: no turn (and so no
    permission request pending), not being released."""
    return isinstance(session.port, DetachedPort) and session.turn is None \
        and not session.released and session.adapter is not None


def releasable(registry: SessionRegistry[EdgeSession], principal: str) -> list[EdgeSession]:
    """``principal``'s detached idle sessions, the longest detached first."""
    found = [s for s in registry.active.values()
             if s.principal == principal and detached_idle(s)]
    found.sort(key=lambda s: s.port.detached_at if isinstance(s.port, DetachedPort) else 0.0)
    return found


def let_go_for_room(runtime: EdgeHub[EdgeSession], principal: str) -> asyncio.Task[None] | None:
    """Release ``principal``'s longest-detached idle session to make room for its next one
    (module doc); its slot is free when this returns, the release (adapter, lease, row)
    goes on in the task returned. None: it has no such session here."""
    candidates = releasable(runtime.registry, principal)
    if not candidates:
        return None
    session = candidates[0]
    port = session.port
    if isinstance(port, DetachedPort) and port.expiry is not None:
        port.expiry.cancel()
    log.info("session_detach_released_for_room", session_id=session.session_id)
    runtime.remove(session)  # the slot is free from now on
    return runtime.spawn(runtime.release(session, "disconnect"))


def releasable_picture(registry: SessionRegistry[EdgeSession]) -> Counter[tuple[int, str]]:
    """The detached idle sessions here, by principal, as an edge worker reports them."""
    held: Counter[tuple[int, str]] = Counter()
    for session in registry.active.values():
        if detached_idle(session):
            held[(SLOT_SESSION_RELEASABLE, session.principal)] += 1
    return held


def release_ordered(runtime: EdgeHub[EdgeSession], principal: str, count: int) -> None:
    """Release up to ``count`` of ``principal``'s detached idle sessions here, for a take
    of that principal's on another worker (the session service ordered it)."""
    for _ in range(count):
        if let_go_for_room(runtime, principal) is None:
            return
