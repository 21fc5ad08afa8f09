"""One client connection of the dialect: a JSON-RPC peer with the dialect's methods (SPEC §1).

:class:`DialectConnection` configures a :class:`~services.common.jsonrpc.JsonRpcPeer`
for one client: ``zc-out-N`` ids for the back-channel (SPEC §6), every error
answer counted in the metrics, and the routing of the protocol version it speaks
(a :class:`Dialect`, built from the method table :mod:`services.edge.dialect.methods`).
The peer classifies lines, routes responses, runs every request and
notification in its own task (a ``session/cancel`` is answered while a prompt
streams) and answers each request exactly once — at most :data:`MAX_IN_FLIGHT`
at a time: past that the peer reads no further line until one is answered, so a
client cannot pile up requests faster than they are answered. What
each method does lives in ``services.edge.dialect.handlers`` (and ``…dialect.v2``); the
connection is handed one :class:`Dialect` per protocol version a client may pick.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.common.acp.schema import ClientCapabilities
from services.common.acp.v2.client_wire import ClientWire
from services.common.acp.v2.names import PROTOCOL_V1
from services.common.attach_protocol import MSG_OBSERVER
from services.common.jsonrpc import JsonRpcError, JsonRpcPeer, notification_line, prefixed_ids
from services.common.protocol import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    M_CANCEL_REQUEST,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
    MSG_SHUTTING_DOWN,
    MSG_TOKEN_REVOKED,
    OBSERVER_READ_ONLY,
    OUTBOUND_ID_PREFIX,
)
from services.edge.caller import Caller
from services.edge.dialect.advertised import Capability
from services.edge.errors import not_found
from services.edge.params import first_str
from services.edge.ports.backchannel import BackChannel
from services.edge.sessions.clients import leave
from services.edge.sessions.runtime import EdgeRuntime
from services.edge.sessions.session import EdgeSession

#: One dialect method: the connection it arrived on and its params → the result.
Handler = Callable[["DialectConnection", dict[str, Any]], Awaitable[Any]]
#: What serves a method the table has no handler for: the connection, the method, its
#: params and whether it is a notification → the result (the relay).
Fallback = Callable[["DialectConnection", str, dict[str, Any], bool], Awaitable[Any]]



@dataclass(frozen=True)
class Dialect:
    """One protocol version as a connection routes it (each field read from the method
    table, :mod:`services.edge.dialect.methods`)."""

    #: Wire name → handler, for every method the version serves (or refuses) itself.
    handlers: Mapping[str, Handler]
    #: The methods a connection may call naming a session it only observes.
    observer_methods: frozenset[str] = frozenset()
    #: What ``initialize`` advertises of the methods served (whether promised or not).
    capabilities: tuple[Capability, ...] = field(default=())


#: Requests (and notifications) of one connection that may run at once; reading waits
#: past it. Far above what a client needs (max_sessions prompts and a few more).
MAX_IN_FLIGHT = 1024


class DialectConnection:
    """One client connection speaking the dialect (stdio or one WebSocket)."""

    def __init__(self, runtime: EdgeRuntime, send: Callable[[str], Awaitable[None]],
                 *, caller: Caller, methods: Mapping[str, Handler] | None = None,
                 default_agent: str = "",
                 fallback: Fallback | None = None,
                 remote: bool = False,
                 send_many: Callable[[list[str]], Awaitable[None]] | None = None,
                 max_in_flight: int = MAX_IN_FLIGHT,
                 detach_grace_secs: float = 0.0,
                 dialects: Mapping[int, Dialect] | None = None) -> None:
        self.runtime = runtime
        #: Who this connection acts as (services.edge.caller; see serve_connection).
        self.caller = caller
        #: A gateway (remote) client, not the local stdio user: what its ``mcpServers`` may
        #: be follows ``[gateway] client_mcp_servers`` (services/edge/dialect/mcp_admission.py).
        self.remote = remote
        #: How long the sessions this connection used outlive it, detached
        #: (``[gateway] detach_grace_secs`` for a gateway connection, 0 for stdio: released).
        self.detach_grace_secs = detach_grace_secs
        #: Its sessions' agents' requests of methods acpgate does not know reach it.
        self.passes_unknown = True
        self._raw_send = send
        #: The transport's own batch send, which keeps order and bounds what waits
        #: (then no lock here: every answer waiting for the client is the transport's
        #: to see and to bound, not hidden in a queue of lock waiters).
        self._raw_send_many = send_many
        self._send_lock = asyncio.Lock()
        self.default_agent = default_agent.strip()
        # A back-channel request the edge gives up on is withdrawn ($/cancel_request).
        self.rpc = JsonRpcPeer(self.send, self._serve, next_id=prefixed_ids(OUTBOUND_ID_PREFIX),
                               withdraw_method=M_CANCEL_REQUEST,
                               on_error=runtime.metrics.count_error, label="client",
                               max_running=max_in_flight)
        self.backchannel = BackChannel(self.rpc)
        #: What the client said it can do in ``initialize`` (passed on to adapters).
        self.client_capabilities = ClientCapabilities()
        #: The sessions this connection drives: those it set up, and those it attached as
        #: a controller.
        self.sessions: dict[str, EdgeSession] = {}
        #: The sessions it attached as an observer: it only watches them.
        self.observing: dict[str, EdgeSession] = {}
        #: ``initialize``'s ``clientInfo`` (how other clients of a session are told who).
        self.client_info: dict[str, Any] | None = None
        self._fallback = fallback
        #: The routing of each protocol version a client may pick in ``initialize``
        #: (``methods`` alone: a v1 table of those handlers, nothing else).
        self._dialects: Mapping[int, Dialect] = dialects or {
            PROTOCOL_V1: Dialect(methods or {})}
        #: The routing of the version spoken (v1 until ``initialize`` picks another).
        self.dialect = self._dialects[PROTOCOL_V1]
        #: The version ``initialize`` chose (1 until a client picks another).
        self.protocol_version = PROTOCOL_V1
        #: A v2 connection's translation of what it sends and reads (None for v1: the v1
        #: relay path pays nothing for v2).
        self.wire: ClientWire | None = None
        #: What the connection's agent keeps for this connection alone (credentials of
        #: ``authenticate``, an adapter started before any session). Set by the
        #: handlers (``services.edge.dialect.handlers.connection_agent``); closed with the connection.
        self.agent_state: Any = None
        #: Set once the drain is over: from then on a setup that finishes is released, not
        #: entered (:func:`services.edge.sessions.session_setup.mark_active`).
        self._releasing = False
        #: Set as :meth:`close` begins: no session is attached to this connection any more.
        self._input_ended = False
        self._closed = False
        self._revoked = False
        self._stopping = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` releases (or has released) this connection's sessions."""
        return self._releasing

    @property
    def input_ended(self) -> bool:
        """True once the client's input ended (:meth:`close` began)."""
        return self._input_ended

    # ------------------------------------------------------------------ I/O

    async def send(self, line: str) -> None:
        """Write one message; a gone client raises ConnectionError."""
        await self.send_many([line])

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send one notification to the client; a gone client raises ConnectionError."""
        await self.send_many([notification_line(method, params)])

    async def send_many(self, lines: list[str]) -> None:
        """Write several messages in order under one hold of the send lock (a replay
        of thousands of updates pays the lock once, not per line); a gone client raises
        ConnectionError."""
        if self._closed:
            raise ConnectionError("client connection closed")
        if self.wire is not None:
            lines = self.wire.outbound(lines)
            if not lines:
                return
        if self._raw_send_many is not None:
            await self._raw_send_many(lines)
            return
        async with self._send_lock:
            for line in lines:
                await self._raw_send(line)

    # ------------------------------------------------------------------ inbound

    async def read(self, incoming: AsyncIterator[str]) -> AsyncIterator[str]:
        """The client's messages as the JSON-RPC peer reads them: as they came on a v1
        connection; on a v2 one through its wire (a batch split into its entries, and what
        an answer to a permission request changes in the session's state sent after it)."""
        async for line in incoming:
            wire = self.wire
            if wire is None:
                yield line
                continue
            feed, after = wire.inbound(line)
            for entry in feed:
                yield entry
            if after:
                try:
                    await self.send_many(after)
                except (ConnectionError, OSError):
                    return

    def use_version(self, version: int) -> None:
        """Speak ``version`` from now on (``initialize`` chose it): its method table, and
        for a version above 1 the translation of what is sent and read."""
        self.dialect = self._dialects.get(version, self.dialect)
        self.protocol_version = version
        self.wire = ClientWire(self.serves) if version != PROTOCOL_V1 else None

    def speaks(self, version: int) -> bool:
        """True when a method table for ``version`` was given to this connection."""
        return version in self._dialects

    def handles(self, method: str) -> bool:
        """True when the method table has a handler for ``method``."""
        return method in self.dialect.handlers

    async def _serve(self, method: str, params: dict[str, Any], notification: bool) -> Any:
        """The peer's handler: the method table's handler, else its fallback (the relay),
        else -32601 (a notification gets no answer); -32000 once the connection's token was
        revoked (:meth:`revoke`)."""
        self.still_served()
        self.refuse_observer(method, params)
        handler = self.dialect.handlers.get(method)
        if handler is not None:
            return await handler(self, params)
        if self._fallback is not None:
            return await self._fallback(self, method, params, notification)
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))

    def still_served(self) -> None:
        """Raise what a request gets once the connection's token was revoked (-32000) or
        the gateway stops; a request that waited (a queued prompt) asks again before it
        goes on."""
        if self._revoked:
            raise JsonRpcError(AUTH_REQUIRED, MSG_TOKEN_REVOKED)
        if self._stopping:
            raise JsonRpcError(INTERNAL_ERROR, MSG_SHUTTING_DOWN)

    # ------------------------------------------------------------------ sessions

    def refuse_observer(self, method: str, params: dict[str, Any]) -> None:
        """-32006 when ``method`` names (``sessionId`` / ``session_id``) a session this
        connection only observes and is not one the method table lets an observer call
        (:attr:`Dialect.observer_methods`): the one check of an observer's role, for every
        method — served here or relayed to the agent."""
        if not self.observing or method in self.dialect.observer_methods:
            return
        sid = first_str(params, "sessionId", "session_id")
        if sid and sid in self.observing and sid not in self.sessions:
            raise JsonRpcError(OBSERVER_READ_ONLY, MSG_OBSERVER.format(session_id=sid))

    def active_session(self, sid: str) -> EdgeSession:
        """This connection's active session ``sid``, else -32000 (and it is forgotten)."""
        session = self.sessions.get(sid)
        if session is None and sid in self.observing:
            raise JsonRpcError(OBSERVER_READ_ONLY, MSG_OBSERVER.format(session_id=sid))
        if session is None or session.released or \
                self.runtime.registry.active.get(sid) is not session:
            if session is not None:
                self.forget_session(sid, session)
            raise not_found(sid)
        session.confirmed = True  # the client knows it: its setup answer reached it
        return session

    def forget_session(self, session_id: str, session: object | None = None) -> None:
        """Its attachment to ``session_id`` was closed (dropped as slow, closed, detached,
        or the session ended): the session is no longer this connection's to drive or
        watch, and what the connection kept of it goes (a v2 connection's translation
        state). With ``session``: only when that is the session this connection has under
        the id (a later session of the same id, set up here again, stays)."""
        for held in (self.sessions, self.observing):
            if session is None or held.get(session_id) is session:
                held.pop(session_id, None)
        if self.wire is not None and session_id not in self.sessions \
                and session_id not in self.observing:
            self.wire.forget(session_id)

    def serves(self, session_id: str) -> bool:
        """True while ``session_id`` is this connection's to drive or watch, or being set
        up (on this edge: its updates may reach this connection before its setup answer)."""
        registry = self.runtime.registry
        return session_id in self.sessions or session_id in self.observing \
            or session_id in registry.restoring or session_id in registry.creating

    # ------------------------------------------------------------------ end

    def revoke(self) -> None:
        """The connection's token was revoked (it is being closed): what it asks from now on
        is refused, and its running turns are cancelled at once — ACP ``session/cancel`` to
        each adapter, and the turns of the sessions they spawned or asked; a cancelled turn
        is never stored — instead of running on, and being stored, through the close's
        drain. Idempotent."""
        if self._revoked:
            return
        self._revoked = True
        for session in list(self.sessions.values()):
            session.cancel(keep=False)

    def stop(self) -> list[str]:
        """The gateway stops: what the client asks from now on is refused, and
        the running turns are cancelled at once (ACP ``session/cancel``, as the client's own
        cancel would; their prompts answer ``cancelled``, before the connection closes).
        Returns the ids of the sessions whose turn was cancelled."""
        self._stopping = True
        return [sid for sid, session in list(self.sessions.items()) if session.cancel()]

    async def close(self, *, drain_secs: float = 15.0,
                    abort: asyncio.Event | None = None) -> None:
        """The client's input ended: finish what it asked, then release its sessions.

        Back-channel requests fail at once (nobody can answer them any more:
        the tools they guard are denied). Requests already read run on for up
        to ``drain_secs`` — a stdio client or CI runner may close stdin and
        keep reading — or until ``abort`` is set; then they are cancelled.
        Only after that are the connection's sessions released (adapters
        closed, rows kept), so a request still running never loses its session.

        Unless the connection's token was revoked or the gateway stops, the connection
        first leaves the sessions it is attached to
        (:func:`services.edge.sessions.clients.leave`): one it joined with
        ``session/attach`` goes on with its other clients; one it holds passes to another
        controller attached to it, else — a gateway connection (``detach_grace_secs`` > 0)
        whose client used it — detaches (its turn runs on, its permission requests wait
        for the next controller; :mod:`services.edge.sessions.clients`). A session whose
        setup the client never saw answered is released as before.
        """
        self._input_ended = True
        if not self._revoked and not self._stopping:
            self._leave_attached()
        self.backchannel.close()
        await self.rpc.drain(drain_secs, abort)
        # Before the cancel: a setup that still gets through (it finished as the drain
        # ran out) then releases its session itself instead of entering it after the
        # sessions below were collected.
        self._releasing = True
        await self.rpc.cancel()
        await self._release_all()
        close = getattr(self.agent_state, "close", None)
        if close is not None:  # its credentials are forgotten, its adapter let go
            await close()
        self._closed = True

    def _leave_attached(self) -> None:
        for sid, session in list(self.observing.items()):
            del self.observing[sid]
            leave(session, self, grace_secs=0)
        for sid, session in list(self.sessions.items()):
            if session.released:
                continue
            grace = self.detach_grace_secs if session.confirmed else 0.0
            if leave(session, self, grace_secs=grace):
                del self.sessions[sid]

    async def _release_all(self) -> None:
        sessions = list(self.sessions.values())
        self.sessions.clear()
        await asyncio.gather(*(self.runtime.deactivate(s, "disconnect") for s in sessions),
                             return_exceptions=True)
