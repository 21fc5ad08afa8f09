"""The client connections of one live session: fan-out, attach, detach, leave.

A live session has one *primary* port (``EdgeSession.port``: the connection that
created or restored it, an :class:`Attachment` that took over, or a
``DetachedPort`` while no controller is there) and any number of further
:class:`Attachment` s (``session/attach``: controllers and observers). Every
relayed update is numbered by the session's :class:`~services.edge.sessions.feed.
SessionFeed` and goes to all of them.

An attachment writes through a queue of its own, bounded in characters
(``[gateway] attach_queue_chars``) and in lines: the session hands it what to
send and never waits for it. A client that does not read fills its queue and is
*dropped* (its attachment closed and told so by ``_acpgate/attachment_closed``
with reason ``slow_client``) — the session, and the other clients, never wait for
it. Nothing is lost by a drop: the client attaches again with the last event id it
saw and gets the rest from the ring.

When the primary connection goes, another controller attached to the session takes
its place (it was getting every update already); with none, the session detaches
(below) and waits ``[gateway] detach_grace_secs`` for one. Observers never hold a session: the session ends with its last controller.

**Detached sessions.** When a gateway connection goes away, its sessions the client has
used are not released but *detached*: their port becomes a :class:`DetachedPort` (what the
agent streams meanwhile reaches nobody), the turn runs on, the adapter stays,
and a permission request waits for a client to come back
(:class:`FollowingBackChannel`). A detached session is still active — it keeps
its slot, so it counts against its token's share — and is released as before
(``deactivate(..., "disconnect")``) once ``[gateway] detach_grace_secs`` pass
without a client attaching it again — counted from the end of its background work, when
a v2 agent reports some (:mod:`services.edge.sessions.subagents`). A connection of the
session's own principal attaches it again with ``session/attach``, ``session/load`` or
``session/resume`` (``services.edge.dialect.handlers.attach`` / ``restore``) and gets
what it missed from the session's event ring (:mod:`services.edge.sessions.feed`).

The session's requests to its human (:class:`FollowingBackChannel`) go to every
controller attached: the first answer wins, the
other controllers' copies are withdrawn (``$/cancel_request``) and every other client is
told ``permission_resolved``; across a detach the request waits for a controller to come.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from services.common.acp.schema import ClientCapabilities
from services.common.attach_protocol import (
    DROP_SLOW_CLIENT,
    M_ATTACHMENT_CLOSED,
    ROLE_CONTROLLER,
    U_CLIENT_DISCONNECTED,
    U_PERMISSION_RESOLVED,
)
from services.common.jsonrpc import notification_line
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
from services.edge.sessions.feed import Event

if TYPE_CHECKING:
    from services.edge.ports.backchannel import Asking
    from services.edge.ports.client_port import ClientPort
    from services.edge.sessions.subagents import SessionWork

__all__ = ["Attachment", "DetachedPort", "FollowingBackChannel", "Served", "SessionClients", "attach",
           "changed", "conn_of", "detach", "leave", "let_go", "promote", "report_turn_end",
           "turn_complete"]

log = get_logger("edge.clients")

#: The most lines an attachment's queue holds (besides its characters' bound).
ATTACH_QUEUE_LINES = 4096


class AttachedConnection(Protocol):
    """What an attachment needs of the client connection it writes to
    (``services.edge.dialect.dispatch.DialectConnection``)."""

    @property
    def remote(self) -> bool:
        """A gateway client."""

    @property
    def passes_unknown(self) -> bool:
        """Unknown agent methods reach it."""

    @property
    def detach_grace_secs(self) -> float:
        """How long its sessions outlive it."""

    @property
    def client_capabilities(self) -> ClientCapabilities:
        """What it said it can do."""

    @property
    def backchannel(self) -> Asking:
        """Requests to it."""

    @property
    def client_info(self) -> dict[str, Any] | None:
        """``initialize``'s ``clientInfo`` (``sentBy`` / ``resolvedBy`` of the attach RFD)."""

    async def send_many(self, lines: list[str]) -> None:
        """Write lines to the client in order."""

    def forget_session(self, session_id: str, session: object | None = None) -> None:
        """The connection no longer serves ``session_id`` (its attachment was closed, or
        the session ended); with ``session``, only when it is that session it has."""


class Served(Protocol):
    """What a session's client connections need of the session they serve (an
    ``EdgeSession``): its primary port, which they move (and wake whoever waits for it to
    move), whether it is attached, confirmed or released, its attachments, its agent's
    background work, its own updates, and the runtime's tasks, clock and release."""

    port: ClientPort
    port_moved: asyncio.Event

    @property
    def session_id(self) -> str:
        """The session's id."""

    @property
    def attached(self) -> asyncio.Event:
        """Set while a controller connection holds the session."""

    @property
    def confirmed(self) -> bool:
        """The client has used the session after its setup answer."""

    @property
    def released(self) -> bool:
        """The session is being released."""

    @property
    def clients(self) -> SessionClients:
        """Its attachments besides the primary port."""

    @property
    def work(self) -> SessionWork:
        """Its agent's background work (a detached session's grace waits for it)."""

    async def publish_own(self, updates: list[dict[str, Any]], *,
                          not_for: object | None = None) -> None:
        """Send updates acpgate makes to every client but ``not_for``, numbered."""

    def touch(self) -> None:
        """Mark activity now."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the runtime."""

    def now(self) -> float:
        """The runtime's clock."""

    async def deactivate(self, reason: str) -> None:
        """Remove the session and release it (the stored record stays)."""


def conn_of(port: object) -> object:
    """The client connection behind ``port`` (an attachment's, or the port itself)."""
    return port.conn if isinstance(port, Attachment) else port


class Attachment:
    """One client connection attached to a live session, writing through its own bounded
    queue (module doc). Usable as the session's primary port (:class:`ClientPort`)."""

    def __init__(self, clients: SessionClients, conn: AttachedConnection, role: str,
                 max_chars: int) -> None:
        self._clients = clients
        self.conn = conn
        self.role = role
        self.remote = conn.remote
        self.passes_unknown = conn.passes_unknown
        self.detach_grace_secs = conn.detach_grace_secs
        self._max_chars = max(1, max_chars)
        self._queue: deque[tuple[int, str]] = deque()
        self._chars = 0
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        #: The newest event id handed to the connection.
        self.delivered = 0
        self.closed = False

    @property
    def client_capabilities(self) -> ClientCapabilities:
        """The attached client's capabilities."""
        return self.conn.client_capabilities

    @property
    def backchannel(self) -> Asking:
        """Requests to the attached client."""
        return self.conn.backchannel

    # ------------------------------------------------------------------ ClientPort

    async def send_many(self, lines: list[str]) -> None:
        """Queue lines that are not numbered events (a notification of the agent's)."""
        if self.closed:
            raise ConnectionError("attachment closed")
        self.offer([(0, line) for line in lines])

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Queue one notification."""
        await self.send_many([notification_line(method, params)])

    # ------------------------------------------------------------------ the queue

    def offer(self, items: list[tuple[int, str]]) -> None:
        """Queue ``(event id, line)`` pairs without waiting; a full queue drops the client."""
        if self.closed or not items:
            return
        self._queue.extend(items)
        self._chars += sum(len(line) for _, line in items)
        if self._chars > self._max_chars or len(self._queue) > ATTACH_QUEUE_LINES:
            self._clients.drop(self, DROP_SLOW_CLIENT)
            return
        self._wake.set()

    def start(self) -> None:
        """Begin writing what was queued (after the attach's replay went out)."""
        if self._writer is None and not self.closed:
            self._writer = self._clients.session.spawn(self._pump())
            self._wake.set()

    async def flush(self) -> None:
        """Write what is queued, in the caller's task, until nothing is (before :meth:`start`:
        what the session streamed during a replay goes out before what the caller sends
        next); a gone client raises ConnectionError."""
        while self._queue and not self.closed and self._writer is None:
            await self._write_queued()

    async def _pump(self) -> None:
        while not self.closed:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._write_queued()
            except (ConnectionError, OSError):
                self._clients.remove(self)  # the connection's close says the rest
                return

    async def _write_queued(self) -> None:
        batch = list(self._queue)
        self._queue.clear()
        self._chars = 0
        if not batch:
            return
        await self.conn.send_many([line for _, line in batch])
        self.delivered = max(self.delivered, max(eid for eid, _ in batch))

    def close(self) -> None:
        """Stop writing; what is queued is dropped."""
        self.closed = True
        self._queue.clear()
        self._chars = 0
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()


class SessionClients:
    """The attachments of one session besides its primary port, and the fan-out."""

    def __init__(self, session: Served) -> None:
        self.session = session
        self.extra: list[Attachment] = []
        #: The newest event id handed to a primary port that is a plain connection.
        self.primary_delivered = 0
        #: What :meth:`publish` was given while held (:meth:`hold`), in order; None: not held.
        self._held: list[tuple[list[Event], list[str] | None]] | None = None

    def hold(self) -> None:
        """Keep what is published from now on until :meth:`release_held`: a new session's
        updates (an agent's ``available_commands_update`` right after its ``session/new``)
        must not reach the client before the answer that tells it the session's id."""
        if self._held is None:
            self._held = []

    async def release_held(self) -> None:
        """Publish what was held, in order (what is published meanwhile queues behind it),
        and publish directly from then on."""
        while self._held:
            events, extra_lines = self._held.pop(0)
            await self._send(events, extra_lines)
        self._held = None

    def controllers(self) -> list[ClientPort]:
        """Who may answer the session's requests now: the primary port (unless detached)
        and every controller attachment."""
        ports: list[ClientPort] = []
        if not isinstance(self.session.port, DetachedPort):
            ports.append(self.session.port)
        ports.extend(a for a in self.extra if a.role == ROLE_CONTROLLER and not a.closed)
        return ports

    def count(self) -> int:
        """The clients attached now: the primary port (unless detached) and every open
        attachment, observers included (``acpgate ps``, the console's host page)."""
        primary = 0 if isinstance(self.session.port, DetachedPort) else 1
        return primary + sum(1 for a in self.extra if not a.closed)

    def info_of(self, conn: object) -> dict[str, Any]:
        """A client as the attach RFD names it (``sentBy``, ``resolvedBy``)."""
        info = getattr(conn, "client_info", None)
        return dict(info) if isinstance(info, dict) else {}

    async def publish(self, events: list[Event], extra_lines: list[str] | None = None) -> None:
        """Send numbered ``events`` (then ``extra_lines``, not numbered) to every client of
        the session: queued for each attachment, written to a primary connection (kept
        back while the session's updates are held: :meth:`hold`)."""
        if self._held is not None:
            self._held.append((events, extra_lines))
            return
        await self._send(events, extra_lines)

    async def _send(self, events: list[Event], extra_lines: list[str] | None) -> None:
        for attachment in list(self.extra):
            attachment.offer([(e.event_id, e.line) for e in events
                              if e.not_for is not attachment.conn]
                             + [(0, line) for line in extra_lines or ()])
        port = self.session.port
        if isinstance(port, Attachment):
            port.offer([(e.event_id, e.line) for e in events if e.not_for is not port.conn]
                       + [(0, line) for line in extra_lines or ()])
            return
        lines = [e.line for e in events if e.not_for is not port]
        lines.extend(extra_lines or ())
        if not lines:
            return
        try:
            await port.send_many(lines)
        except (ConnectionError, OSError):
            log.info("client_gone_during_update", session_id=self.session.session_id)
            return
        if events and self.session.port is port:
            self.primary_delivered = max(self.primary_delivered, events[-1].event_id)

    def delivered_to(self, port: object) -> int:
        """The newest event id handed to ``port`` (the primary port)."""
        return port.delivered if isinstance(port, Attachment) else self.primary_delivered

    def remove(self, attachment: Attachment) -> None:
        """Take ``attachment`` out of the session (closed; its connection forgets the
        session); a primary one leaves as a connection does (:func:`leave`)."""
        session = self.session
        attachment.close()
        attachment.conn.forget_session(session.session_id, session)
        if attachment in self.extra:
            self.extra.remove(attachment)
            _left(session)
        elif session.port is attachment and not session.released and \
                not leave(session, attachment.conn, grace_secs=attachment.detach_grace_secs):
            session.spawn(session.deactivate("disconnect"))

    def drop(self, attachment: Attachment, reason: str) -> None:
        """Close ``attachment`` for ``reason`` and tell its client so (best effort: a client
        that does not read may never see it)."""
        log.info("attachment_dropped", session_id=self.session.session_id, reason=reason,
                 role=attachment.role)
        self.remove(attachment)
        notice = notification_line(M_ATTACHMENT_CLOSED, {
            "sessionId": self.session.session_id, "reason": reason})
        self.session.spawn(_tell(attachment.conn.send_many, [notice]))

    def close_all(self, reason: str) -> None:
        """The session ends: every attachment is closed and told ``reason``."""
        for attachment in list(self.extra):
            self.drop(attachment, reason)


def let_go(session: Served) -> None:
    """The session ended (its release is over): the connection it was served to as its
    primary port forgets it, as its attachments did when they were closed
    (:meth:`SessionClients.close_all`) — a connection that lives on holds no session that
    ended; a primary port that is an attachment stops writing. A detached or hosted
    session's port is no connection: nothing to forget."""
    port = session.port
    if isinstance(port, Attachment):
        port.close()
    # A client connection (``DialectConnection``, a layer above) is the only port with it.
    forget: Callable[[str, object], None] | None = getattr(conn_of(port), "forget_session", None)
    if forget is not None:
        forget(session.session_id, session)


def _left(session: Served) -> None:
    """An attachment left: a pending request to the human looks at the controllers again
    (the one that left is no longer asked, its copy withdrawn)."""
    changed(session)


async def _tell(send: Callable[[list[str]], Awaitable[None]], lines: list[str]) -> None:
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        await asyncio.wait_for(send(lines), 5.0)


def leave(session: Served, conn: object, *, grace_secs: float) -> bool:
    """Client connection ``conn`` no longer serves ``session``: an attachment of it is
    removed; as the primary port, another controller takes its place, else the session
    detaches for ``grace_secs`` (> 0). The clients that stay are told
    ``client_disconnected``. False when the caller is to release the session (``conn`` was
    its last controller and there is no grace)."""
    clients = session.clients
    roles = [a.role for a in clients.extra if a.conn is conn]
    for attachment in list(clients.extra):
        if attachment.conn is conn:
            attachment.close()
            clients.extra.remove(attachment)
    if roles:
        _left(session)
    if conn_of(session.port) is conn:
        port = session.port
        roles.append(ROLE_CONTROLLER)
        if isinstance(port, Attachment):
            port.close()
        heir = next((a for a in clients.extra if a.role == ROLE_CONTROLLER and not a.closed),
                    None)
        if heir is not None:
            clients.extra.remove(heir)
            promote(session, heir)
        elif grace_secs > 0:
            detach(session, grace_secs, delivered=clients.delivered_to(port))
        else:
            return False
    if roles and (clients.extra or not isinstance(session.port, DetachedPort)):
        gone = {"sessionUpdate": U_CLIENT_DISCONNECTED,
                "client": {**clients.info_of(conn), "role": roles[-1]}}
        session.spawn(session.publish_own([gone]))
    return True


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

    def __init__(self, session: Served) -> None:
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
        session.spawn(session.publish_own([update], not_for=winner))


def detach(session: Served, grace_secs: float, *, delivered: int = 0) -> None:
    """Detach ``session`` from its controller connection, which is gone; release it (as a
    disconnect always did) unless a controller attaches it within ``grace_secs``.
    ``delivered``: the newest event id handed to that connection."""
    port = DetachedPort(session.port.client_capabilities, delivered)
    port.detached_at = session.now()
    _move(session, port)
    session.attached.clear()
    port.expiry = session.spawn(_expire(session, port, grace_secs))
    log.info("session_detached", session_id=session.session_id, grace_secs=grace_secs)


def attach(session: Served, port: ClientPort) -> None:
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


def promote(session: Served, heir: Attachment) -> None:
    """The primary connection left: controller attachment ``heir`` takes its place."""
    log.info("session_promoted", session_id=session.session_id)
    _move(session, heir)


def changed(session: Served) -> None:
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


async def report_turn_end(session: Served, prompter: object,
                          update: dict[str, Any]) -> None:
    """A turn ended: every client but ``prompter`` (who gets the ``session/prompt`` answer)
    is told with ``update``, a numbered event — a client attaching later replays it."""
    await session.publish_own([update], not_for=prompter)


def _move(session: Served, port: ClientPort) -> None:
    """Point ``session`` at ``port``; whoever waited for it to move is woken."""
    session.port = port
    changed(session)


async def _expire(session: Served, port: DetachedPort, grace_secs: float) -> None:
    await asyncio.sleep(grace_secs)
    while session.work.alive and session.port is port:
        # Background work (a v2 agent's) keeps a detached session: its grace starts over
        # once the work ended.
        await session.work.quiet()
        await asyncio.sleep(grace_secs)
    if session.port is port and not session.released:
        log.info("session_detach_expired", session_id=session.session_id)
        await session.deactivate("disconnect")
