"""A session that outlives its client connection (issue 27): detach, wait, reattach.

When a gateway connection goes away, its sessions the client has used are not
released but *detached*: their port becomes a :class:`DetachedPort` (what the
agent streams meanwhile reaches nobody), the turn runs on, the adapter stays,
and a permission request waits for a client to come back
(:class:`FollowingBackChannel`). A detached session is still active — it keeps
its slot, so it counts against its token's share — and is released as before
(``deactivate(..., "disconnect")``) once ``[gateway] detach_grace_secs`` pass
without a client attaching it again. A connection of the session's own
principal attaches it again with ``session/load`` or ``session/resume``
(``services.edge.dialect.handlers.restore``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from services.common.acp.schema import ClientCapabilities
from services.common.jsonrpc import notification_lines
from services.common.logs import get_logger
from services.common.protocol import M_SESSION_UPDATE, U_TURN_COMPLETE
from services.edge.ports.backchannel import BackChannelTimeout, ClientGone

if TYPE_CHECKING:
    from services.edge.ports.client_port import ClientPort
    from services.edge.sessions.session import EdgeSession

__all__ = ["DetachedPort", "FollowingBackChannel", "attach", "detach", "report_turn_end",
           "turn_complete"]

log = get_logger("edge.attachment")


class _NobodyToAsk:
    """The back-channel of a detached session: nobody is there to answer."""

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Fails at once: the caller (:class:`FollowingBackChannel`) waits for a client."""
        raise ClientGone("no client attached")


class DetachedPort:
    """The port of a session no client connection holds: updates reach nobody, requests
    wait for a client to attach (see :class:`FollowingBackChannel`)."""

    remote = True
    passes_unknown = True
    detach_grace_secs = 0.0

    def __init__(self, client_capabilities: ClientCapabilities) -> None:
        self._caps = client_capabilities
        self._asking = _NobodyToAsk()
        #: When the grace ends the session is released (the task is cancelled on attach).
        self.expiry: asyncio.Task[None] | None = None
        #: Updates relayed while detached (counted: what a later attach cannot replay yet).
        self.missed = 0
        #: The ``turn_complete`` update of a turn that ended while detached, for the next
        #: client that attaches (the ``session/prompt`` answer went to a connection gone).
        self.unreported: dict[str, Any] | None = None

    @property
    def client_capabilities(self) -> ClientCapabilities:
        """What the client that left said it could do (the adapter still goes by it)."""
        return self._caps

    @property
    def backchannel(self) -> _NobodyToAsk:
        """Nobody to ask."""
        return self._asking

    async def send_many(self, lines: list[str]) -> None:
        """Nobody reads them."""
        self.missed += len(lines)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Nobody to tell."""
        raise ConnectionError("no client attached")


class FollowingBackChannel:
    """A session's requests to its human, following the session's current port: a request
    whose client left while the session detached is asked again of the next client that
    attaches, within the one ``wait_secs`` the request was given."""

    def __init__(self, session: EdgeSession) -> None:
        self._session = session

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Ask the attached client; across a detach, wait and ask the next one."""
        session = self._session
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_secs
        while True:
            port = session.port
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BackChannelTimeout(f"no answer to {method} within {wait_secs:g}s")
            moved = session.port_moved
            try:
                return await port.backchannel.request(method, params, remaining)
            except ClientGone:
                if session.released:
                    raise
                if session.port is not port:
                    continue  # detached (or attached again) meanwhile: ask where it is now
                if isinstance(port, DetachedPort):
                    waiting = session.attached
                elif port.detach_grace_secs > 0 and session.confirmed:
                    # The transport saw the client go before the connection closed: the
                    # session is about to detach; wait for it to move.
                    waiting = moved
                else:
                    raise
            try:
                await asyncio.wait_for(waiting.wait(), deadline - loop.time())
            except TimeoutError:
                raise BackChannelTimeout(
                    f"no answer to {method} within {wait_secs:g}s") from None


def detach(session: EdgeSession, grace_secs: float) -> None:
    """Detach ``session`` from its client connection, which is gone; release it (as a
    disconnect always did) unless a client attaches it within ``grace_secs``."""
    port = DetachedPort(session.port.client_capabilities)
    _move(session, port)
    session.attached.clear()
    port.expiry = session.runtime.spawn(_expire(session, port, grace_secs))
    log.info("session_detached", session_id=session.session_id, grace_secs=grace_secs)


def attach(session: EdgeSession, port: ClientPort) -> list[str]:
    """Serve ``session`` to ``port`` from now on (a client attached it again); returns what
    the client is to be told first (the end of a turn that ended while it was away)."""
    old = session.port
    owed: list[str] = []
    if isinstance(old, DetachedPort):
        if old.expiry is not None:
            old.expiry.cancel()
        if old.unreported is not None:
            owed = notification_lines(M_SESSION_UPDATE, [
                {"sessionId": session.session_id, "update": old.unreported}])
        log.info("session_attached", session_id=session.session_id,
                 missed_updates=old.missed)
    _move(session, port)
    session.attached.set()
    session.touch()
    return owed


def turn_complete(stop_reason: str, result: dict[str, Any]) -> dict[str, Any]:
    """The ``turn_complete`` update (multi-client attach RFD) of a turn that ended with
    ``stop_reason`` and the agent's ``session/prompt`` ``result`` (its usage, if any)."""
    update: dict[str, Any] = {"sessionUpdate": U_TURN_COMPLETE, "stopReason": stop_reason}
    usage = result.get("usage")
    if isinstance(usage, dict):
        update["usage"] = usage
    return update


async def report_turn_end(session: EdgeSession, prompter: ClientPort,
                          update: dict[str, Any]) -> None:
    """A turn ended: a client attached since the prompt was sent (not ``prompter``, who gets
    the ``session/prompt`` answer) is told with ``update``; while detached, the next client
    that attaches is."""
    port = session.port
    if port is prompter:
        return
    if isinstance(port, DetachedPort):
        port.unreported = update
        return
    try:
        await port.send_many(notification_lines(M_SESSION_UPDATE, [
            {"sessionId": session.session_id, "update": update}]))
    except (ConnectionError, OSError):
        log.info("client_gone_during_update", session_id=session.session_id)


def _move(session: EdgeSession, port: ClientPort) -> None:
    """Point ``session`` at ``port``; whoever waited for it to move is woken."""
    session.port = port
    moved, session.port_moved = session.port_moved, asyncio.Event()
    moved.set()


async def _expire(session: EdgeSession, port: DetachedPort, grace_secs: float) -> None:
    await asyncio.sleep(grace_secs)
    if session.port is port and not session.released:
        log.info("session_detach_expired", session_id=session.session_id)
        await session.runtime.deactivate(session, "disconnect")
