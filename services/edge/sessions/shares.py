"""Each token's share of the session slots, and room made by letting detached sessions go.

**The share.** ``[acp] max_sessions_per_token`` when set; else (0, the default)
``max_sessions`` divided among the active (not revoked) gateway tokens, at least one
each. An install with one token — one person's bridge, console and scripts — lets it
use every slot; with several tokens each is sure of its part, whatever the others
hold (the parts add up to at most ``max_sessions``). The count is read from the token
store (``TokenWatch``: one cheap ``PRAGMA data_version`` when nothing changed), so
``acpgate token create`` / ``revoke`` change the share from the next session on; a
token already above a smaller share keeps its sessions and opens no more.

**Room.** A session whose client connection went waits detached for
``[gateway] detach_grace_secs`` (:mod:`services.edge.sessions.clients`) and keeps
its slot. When its principal's next session would pass the share or the host's
limit, the principal's detached *idle* sessions (no turn running, so no permission
request pending either) go first, the longest detached first, released exactly as the
end of the grace releases them (the row stays, loadable). Only the principal's own:
another token's sessions are never let go to make room for it, and a detached session
running a turn keeps its slot. With several edge workers, the session service counts
the slots: each worker reports its releasable sessions (:func:`releasable_picture`) and
releases those the service orders (:func:`release_ordered`) for a take refused on
another worker (``services.session.worker_ledger``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from services.common.config import AcpSection
from services.common.logs import get_logger
from services.edge.backends.session_types import SLOT_SESSION_RELEASABLE
from services.edge.sessions.clients import DetachedPort
from services.edge.sessions.registry import token_session_share
from services.edge.tokens import TokenWatch

if TYPE_CHECKING:
    from services.edge.sessions.registry import SessionRegistry
    from services.edge.sessions.runtime import EdgeRuntime
    from services.edge.sessions.session import EdgeSession

__all__ = ["TokenShares", "detached_idle", "let_go_for_room", "releasable_picture",
           "release_ordered"]

log = get_logger("edge.shares")


class TokenShares:
    """The current share, from the number of active tokens in the token store."""

    def __init__(self, acp: AcpSection, token_db: Path) -> None:
        self._acp = acp
        self._watch = TokenWatch(token_db)
        self._lock = asyncio.Lock()
        self._active = 1

    async def current(self) -> int:
        """The share now (the store read again only when it changed)."""
        if self._acp.max_sessions_per_token > 0:
            return self._acp.max_sessions_per_token
        async with self._lock:
            ids = await asyncio.to_thread(self._watch.active_ids_if_changed)
        if ids is not None:
            self._active = max(1, len(ids))
        return token_session_share(self._acp, self._active)

    def use(self, acp: AcpSection) -> None:
        """A reloaded ``[acp]``: its share rule holds from the next session on."""
        self._acp = acp

    def close(self) -> None:
        """Close the store's read connection."""
        self._watch.close()


def detached_idle(session: EdgeSession) -> bool:
    """Whether ``session`` waits detached with nothing running: no turn (and so no
    permission request pending), not being released."""
    return isinstance(session.port, DetachedPort) and session.turn is None \
        and not session.released and session.adapter is not None


def releasable(registry: SessionRegistry, principal: str) -> list[EdgeSession]:
    """``principal``'s detached idle sessions, the longest detached first."""
    found = [s for s in registry.active.values()
             if s.principal == principal and detached_idle(s)]
    found.sort(key=lambda s: s.port.detached_at if isinstance(s.port, DetachedPort) else 0.0)
    return found


def let_go_for_room(runtime: EdgeRuntime, principal: str) -> asyncio.Task[None] | None:
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


def releasable_picture(registry: SessionRegistry) -> Counter[tuple[int, str]]:
    """The detached idle sessions here, by principal, as an edge worker reports them."""
    held: Counter[tuple[int, str]] = Counter()
    for session in registry.active.values():
        if detached_idle(session):
            held[(SLOT_SESSION_RELEASABLE, session.principal)] += 1
    return held


def release_ordered(runtime: EdgeRuntime, principal: str, count: int) -> None:
    """Release up to ``count`` of ``principal``'s detached idle sessions here, for a take
    of that principal's on another worker (the session service ordered it)."""
    for _ in range(count):
        if let_go_for_room(runtime, principal) is None:
            return
