"""Revoked tokens lose their open connections, whoever revoked them (SPEC §11).

A token is checked at the handshake; ``acpgate token revoke`` runs in another
process and only writes the token store. :class:`RevocationWatch` polls the
store's change marker (:class:`~services.edge.tokens.TokenWatch`, one cheap
``PRAGMA data_version`` per interval while any token holds a connection) and
closes every live connection whose token is no longer active (1008 "token
revoked"), so a revocation takes effect within :data:`REVOCATION_POLL_SECS`
everywhere; the connection's sessions are released as on any close. Right before
the close it sets the connection's :meth:`RevocationWatch.signal`, on which the
dialect cancels the connection's running turns (nothing of them is stored).

A session whose client went away waits detached, held by no connection: the watch
also looks while the edge holds such sessions (:class:`DetachedSessions`), and ends
those of a revoked token the same way — turn cancelled, nothing stored, agent
released — instead of letting them run on until their grace ends.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from websockets.asyncio.server import ServerConnection

from services.common.logs import get_logger
from services.edge.tokens import TokenWatch
from services.edge.transport.admission import LiveConnections

__all__ = ["REVOCATION_POLL_SECS", "REVOKED_CLOSE_CODE", "REVOKED_REASON", "DetachedSessions",
           "RevocationWatch"]

#: How often the token store is looked at while tokens hold connections.
REVOCATION_POLL_SECS = 0.25
#: Close code and reason for the connections of a token revoked meanwhile.
REVOKED_CLOSE_CODE = 1008
REVOKED_REASON = "token revoked"

log = get_logger("edge.ws")


@runtime_checkable
class DetachedSessions(Protocol):
    """The sessions an edge holds for no connection (detached), by their token."""

    def detached_token_ids(self) -> set[str]:
        """The ids of the tokens whose sessions wait detached here."""
        ...

    async def end_detached(self, token_ids: set[str]) -> int:
        """End the detached sessions of ``token_ids`` (nothing of a running turn is
        stored); how many there were."""
        ...


class RevocationWatch:
    """Closes the live connections of revoked tokens, each once, and ends their detached
    sessions. ``sessions``: the edge's runtime (used when it is :class:`DetachedSessions`)."""

    def __init__(self, watch: TokenWatch, live: LiveConnections[Any], sessions: object = None,
                 interval: float = REVOCATION_POLL_SECS,
                 close_other: Callable[[Any], Awaitable[None]] | None = None) -> None:
        self._watch = watch
        self._live = live
        self._detached = sessions if isinstance(sessions, DetachedSessions) else None
        self._interval = interval
        #: How a connection that is no WebSocket is closed (a Streamable HTTP one).
        self._close_other = close_other
        self._active: set[str] | None = None
        self._closed: weakref.WeakSet[Any] = weakref.WeakSet()
        self._signals: weakref.WeakKeyDictionary[Any, asyncio.Event] = (
            weakref.WeakKeyDictionary())
        self._closing: set[asyncio.Task[None]] = set()
        #: Connections closed so far because their token was revoked (for ``/metrics``).
        self.closes_total = 0

    def signal(self, ws: Any) -> asyncio.Event:
        """The event set when ``ws``'s token is revoked, before ``ws`` is closed."""
        return self._signals.setdefault(ws, asyncio.Event())

    async def run(self) -> None:
        """Poll until cancelled; a failing look is logged and tried again next time."""
        try:
            while True:
                await asyncio.sleep(self._interval)
                if self._live.token_ids() or self._detached_ids():
                    try:
                        await self.check()
                    except Exception:
                        log.exception("token_watch_failed")
        finally:
            await asyncio.to_thread(self._watch.close)

    async def check(self) -> None:
        """One look: refresh the active tokens if the store changed, close the revoked."""
        changed = await asyncio.to_thread(self._watch.active_ids_if_changed)
        if changed is not None:
            self._active = changed
        if self._active is None:
            return
        if self._detached is not None and (gone := self._detached_ids() - self._active):
            ended = await self._detached.end_detached(gone)
            if ended:
                log.warning("detached_sessions_token_revoked", sessions=ended)
        revoked = self._live.token_ids() - self._active
        for conn in self._live.of_tokens(revoked):
            if conn in self._closed:
                continue
            self._closed.add(conn)
            task = asyncio.create_task(self._close(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _detached_ids(self) -> set[str]:
        return self._detached.detached_token_ids() if self._detached is not None else set()

    async def _close(self, ws: Any) -> None:
        self.closes_total += 1
        if (revoked := self._signals.get(ws)) is not None:
            revoked.set()
        if not isinstance(ws, ServerConnection) and self._close_other is not None:
            log.warning("http_token_revoked")
            await self._close_other(ws)
            return
        log.warning("ws_token_revoked", remote=ws.remote_address)
        try:
            await ws.close(REVOKED_CLOSE_CODE, REVOKED_REASON)
        except Exception:  # closing a connection that is going away anyway
            ws.transport.abort()
