"""The client connections of one live session: fan-out, attach, leave.

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
(``services.edge.sessions.attachment``) and waits ``[gateway] detach_grace_secs`` for
one. Observers never hold a session: the session ends with its last controller.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from services.common.acp.schema import ClientCapabilities
from services.common.attach_protocol import (
    DROP_SLOW_CLIENT,
    M_ATTACHMENT_CLOSED,
    ROLE_CONTROLLER,
    U_CLIENT_DISCONNECTED,
)
from services.common.jsonrpc import notification_line
from services.common.logs import get_logger
from services.edge.sessions.feed import Event

if TYPE_CHECKING:
    from services.edge.ports.backchannel import Asking
    from services.edge.ports.client_port import ClientPort
    from services.edge.sessions.session import EdgeSession

__all__ = ["Attachment", "SessionClients", "conn_of"]

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

    def forget_session(self, session_id: str) -> None:
        """The connection no longer serves ``session_id`` (its attachment was closed)."""


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
            self._writer = self._clients.session.runtime.spawn(self._pump())
            self._wake.set()

    async def _pump(self) -> None:
        while not self.closed:
            await self._wake.wait()
            self._wake.clear()
            batch = list(self._queue)
            self._queue.clear()
            self._chars = 0
            if not batch:
                continue
            try:
                await self.conn.send_many([line for _, line in batch])
            except (ConnectionError, OSError):
                self._clients.remove(self)  # the connection's close says the rest
                return
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

    def __init__(self, session: EdgeSession) -> None:
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
        from services.edge.sessions.attachment import DetachedPort
        ports: list[ClientPort] = []
        if not isinstance(self.session.port, DetachedPort):
            ports.append(self.session.port)
        ports.extend(a for a in self.extra if a.role == ROLE_CONTROLLER and not a.closed)
        return ports

    def count(self) -> int:
        """The clients attached now: the primary port (unless detached) and every open
        attachment, observers included (``acpgate ps``, the console's host page)."""
        from services.edge.sessions.attachment import DetachedPort
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
        attachment.conn.forget_session(session.session_id)
        if attachment in self.extra:
            self.extra.remove(attachment)
            _left(session)
        elif session.port is attachment and not session.released and \
                not leave(session, attachment.conn, grace_secs=attachment.detach_grace_secs):
            session.runtime.spawn(session.runtime.deactivate(session, "disconnect"))

    def drop(self, attachment: Attachment, reason: str) -> None:
        """Close ``attachment`` for ``reason`` and tell its client so (best effort: a client
        that does not read may never see it)."""
        log.info("attachment_dropped", session_id=self.session.session_id, reason=reason,
                 role=attachment.role)
        self.remove(attachment)
        notice = notification_line(M_ATTACHMENT_CLOSED, {
            "sessionId": self.session.session_id, "reason": reason})
        self.session.runtime.spawn(_tell(attachment.conn.send_many, [notice]))

    def close_all(self, reason: str) -> None:
        """The session ends: every attachment is closed and told ``reason``."""
        for attachment in list(self.extra):
            self.drop(attachment, reason)


def _left(session: EdgeSession) -> None:
    """An attachment left: a pending request to the human looks at the controllers again
    (the one that left is no longer asked, its copy withdrawn)."""
    from services.edge.sessions.attachment import changed
    changed(session)


async def _tell(send: Callable[[list[str]], Awaitable[None]], lines: list[str]) -> None:
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        await asyncio.wait_for(send(lines), 5.0)


def leave(session: EdgeSession, conn: object, *, grace_secs: float) -> bool:
    """Client connection ``conn`` no longer serves ``session``: an attachment of it is
    removed; as the primary port, another controller takes its place, else the session
    detaches for ``grace_secs`` (> 0). The clients that stay are told
    ``client_disconnected``. False when the caller is to release the session (``conn`` was
    its last controller and there is no grace)."""
    from services.edge.sessions.attachment import DetachedPort, detach, promote
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
        session.runtime.spawn(session.publish_own([gone]))
    return True
