"""A session that outlives its client connection: detach, wait, reattach.

When a gateway connection goes away, its sessions the client has used are not
released but *detached*: their port becomes a :class:`DetachedPort` (what the
agent streams meanwhile reaches nobody), the turn runs on, the adapter stays,
and a permission request waits for a client to come back
(:class:`FollowingBackChannel`). A detached session is still active — it keeps
its slot, so it counts against its token's share — and is released as before
(``deactivate(..., "disconnect")``) once ``[gateway] detach_grace_secs`` pass
without a client attaching it again — counted from the end of its background work, when
a v2 agent reports some (:mod:`services.edge.sessions.subagents`). A connection of the session's own
principal attaches it again with ``session/attach``, ``session/load`` or
``session/resume`` (``services.edge.dialect.handlers.attach`` / ``restore``) and gets
what it missed from the session's event ring (:mod:`services.edge.sessions.feed`).

The session's requests to its human (:class:`FollowingBackChannel`) go to every
controller attached (:mod:`services.edge.sessions.clients`): the first answer wins, the
other controllers' copies are withdrawn (``$/cancel_request``) and every other client is
told ``permission_resolved``; across a detach the request waits for a controller to come.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from services.common.acp.schema import ClientCapabilities
from services.common.attach_protocol import (
    U_PERMISSION_RESOLVED,
)
from services.common.logs import get_logger
from services.common.protocol import (
    M_REQUEST_PERMISSION,
    U_TURN_COMPLETE,
)
from services.edge.ports.backchannel import (
    BackChannelTimeout,
    ClientErrorAnswer,
    ClientGone,
)
from services.edge.sessions.clients import Attachment, conn_of

if TYPE_CHECKING:
    from services.edge.ports.client_port import ClientPort
    from services.edge.sessions.session import EdgeSession

__all__ = ["DetachedPort", "FollowingBackChannel", "attach", "detach", "promote",
           "report_turn_end", "turn_complete"]

log = get_logger("edge.attachment")


class _NobodyToAsk:
    """The back-channel of a detached session: nobody is there to answer."""

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Fails at once: the caller (:class:`FollowingBackChannel`) waits for a client."""
        raise ClientGone("no client attached")


class DetachedPort:
    """The port of a session no controller holds: updates reach nobody (the ring keeps
    them), requests wait for a controller to attach (see :class:`FollowingBackChannel`)."""

    remote = True
    passes_unknown = True
    detach_grace_secs = 0.0

    def __init__(self, client_capabilities: ClientCapabilities, delivered: int = 0) -> None:
        self._caps = client_capabilities
        self._asking = _NobodyToAsk()
        #: When the grace ends the session is released (the task is cancelled on attach).
        self.expiry: asyncio.Task[None] | None = None
        #: The newest event id handed to the connection that left: a ``session/resume``
        #: that names none replays after it.
        self.delivered = delivered
        #: Updates relayed while detached (kept in the ring, for the next attach).
        self.missed = 0
        #: When it was detached (the runtime's clock): the longest detached goes first when
        #: its token needs room (services.edge.sessions.shares).
        self.detached_at = 0.0

    @property
    def client_capabilities(self) -> ClientCapabilities:
        """What the client that left said it could do (the adapter still goes by it)."""
        return self._caps

    @property
    def backchannel(self) -> _NobodyToAsk:
        """Nobody to ask."""
        return self._asking

    async def send_many(self, lines: list[str]) -> None:
        """Nobody reads them (the session's ring keeps its updates)."""
        self.missed += len(lines)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Nobody to tell."""
        raise ConnectionError("no client attached")


class FollowingBackChannel:
    """A session's requests to its human: asked of every controller attached, the first
    answer wins; across a detach, asked again of the next controller that attaches, within
    the one ``wait_secs`` the request was given (module doc)."""

    def __init__(self, session: EdgeSession) -> None:
        self._session = session

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        """Ask the controllers; the first answer (or error answer) is the answer."""
        session = self._session
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_secs
        asking: dict[object, asyncio.Future[Any]] = {}
        failed: dict[object, BaseException] = {}
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise BackChannelTimeout(f"no answer to {method} within {wait_secs:g}s")
                controllers = session.clients.controllers()
                now = {conn_of(port) for port in controllers}
                for key in [key for key in asking if key not in now]:
                    # No controller any more (it left, or came back as an observer): its
                    # copy is withdrawn, an answer of it would not count.
                    asking.pop(key).cancel()
                for port in controllers:
                    key = conn_of(port)
                    if key not in asking and key not in failed:
                        asking[key] = asyncio.ensure_future(
                            port.backchannel.request(method, params, remaining))
                if not asking and not self._may_come(failed):
                    # The last controller's failure says why (gone, or no answer in time).
                    raise next(reversed(failed.values()), ClientGone("no controller attached"))
                moved = asyncio.ensure_future(session.port_moved.wait())
                try:
                    await asyncio.wait({*asking.values(), moved}, timeout=remaining,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    moved.cancel()
                for key, task in list(asking.items()):
                    if not task.done():
                        continue
                    del asking[key]
                    exc = task.exception() if not task.cancelled() else ClientGone("withdrawn")
                    if isinstance(exc, ClientErrorAnswer):
                        raise exc  # that controller's answer
                    if exc is not None:
                        failed[key] = exc  # gone, or timed out: the others may still answer
                        continue
                    result = task.result()
                    self._resolved(method, params, key, result, others=bool(asking))
                    return result
        finally:
            for task in asking.values():
                task.cancel()  # the peer withdraws its copy ($/cancel_request)

    def _may_come(self, failed: dict[object, BaseException]) -> bool:
        """Whether a controller may still come to answer: the session is detached, or its
        connection just went and it is about to detach."""
        session = self._session
        if session.released:
            return False
        port = session.port
        if isinstance(port, DetachedPort):
            return True
        return conn_of(port) in failed and port.detach_grace_secs > 0 and session.confirmed

    def _resolved(self, method: str, params: dict[str, Any], winner: object, result: Any,
                  *, others: bool) -> None:
        """Tell every other client a permission request was answered (attach RFD)."""
        session = self._session
        if method != M_REQUEST_PERMISSION or not (others or session.clients.extra):
            return
        tool_call = params.get("toolCall")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        update: dict[str, Any] = {"sessionUpdate": U_PERMISSION_RESOLVED,
                                  "resolvedBy": session.clients.info_of(winner)}
        if isinstance(tool_call, dict) and "toolCallId" in tool_call:
            update["toolCallId"] = tool_call["toolCallId"]
        if isinstance(outcome, dict):
            update["outcome"] = outcome.get("outcome")
            if isinstance(outcome.get("optionId"), str):
                update["chosenOptionId"] = outcome["optionId"]
        session.runtime.spawn(session.publish_own([update], not_for=winner))


def detach(session: EdgeSession, grace_secs: float, *, delivered: int = 0) -> None:
    """Detach ``session`` from its controller connection, which is gone; release it (as a
    disconnect always did) unless a controller attaches it within ``grace_secs``.
    ``delivered``: the newest event id handed to that connection."""
    port = DetachedPort(session.port.client_capabilities, delivered)
    port.detached_at = session.runtime.clock()
    _move(session, port)
    session.attached.clear()
    port.expiry = session.runtime.spawn(_expire(session, port, grace_secs))
    log.info("session_detached", session_id=session.session_id, grace_secs=grace_secs)


def attach(session: EdgeSession, port: ClientPort) -> None:
    """Serve ``session`` to controller ``port`` from now on (a client attached it again)."""
    old = session.port
    if isinstance(old, DetachedPort):
        if old.expiry is not None:
            old.expiry.cancel()
        log.info("session_attached", session_id=session.session_id,
                 missed_updates=old.missed)
    _move(session, port)
    session.attached.set()
    session.touch()


def promote(session: EdgeSession, heir: Attachment) -> None:
    """The primary connection left: controller attachment ``heir`` takes its place."""
    log.info("session_promoted", session_id=session.session_id)
    _move(session, heir)


def changed(session: EdgeSession) -> None:
    """A controller joined or left: whoever waits for one (a pending request) looks again."""
    moved, session.port_moved = session.port_moved, asyncio.Event()
    moved.set()


def turn_complete(stop_reason: str, result: dict[str, Any]) -> dict[str, Any]:
    """The ``turn_complete`` update (multi-client attach RFD) of a turn that ended with
    ``stop_reason`` and the agent's ``session/prompt`` ``result`` (its usage, if any)."""
    update: dict[str, Any] = {"sessionUpdate": U_TURN_COMPLETE, "stopReason": stop_reason}
    usage = result.get("usage")
    if isinstance(usage, dict):
        update["usage"] = usage
    return update


async def report_turn_end(session: EdgeSession, prompter: object,
                          update: dict[str, Any]) -> None:
    """A turn ended: every client but ``prompter`` (who gets the ``session/prompt`` answer)
    is told with ``update``, a numbered event — a client attaching later replays it."""
    await session.publish_own([update], not_for=prompter)


def _move(session: EdgeSession, port: ClientPort) -> None:
    """Point ``session`` at ``port``; whoever waited for it to move is woken."""
    session.port = port
    changed(session)


async def _expire(session: EdgeSession, port: DetachedPort, grace_secs: float) -> None:
    await asyncio.sleep(grace_secs)
    while session.work.alive and session.port is port:
        # Background work (a v2 agent's) keeps a detached session: its grace starts over
        # once the work ended.
        await session.work.quiet()
        await asyncio.sleep(grace_secs)
    if session.port is port and not session.released:
        log.info("session_detach_expired", session_id=session.session_id)
        await session.runtime.deactivate(session, "disconnect")
