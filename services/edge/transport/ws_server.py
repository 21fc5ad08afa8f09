"""The gateway: ``/acp`` on one port — WebSocket and Streamable HTTP (SPEC §11, ACP RFD).

A client connection — a WebSocket, or a Streamable HTTP ``Acp-Connection-Id``
(``services.edge.transport.streamable``) — is one dialect server (``serve_connection``) with
its own ``zc-out-`` counter and sessions; a disconnect (DELETE, idle timeout) releases them. The front door
(``services.edge.transport.server``) speaks HTTP/1.1 and HTTP/2 on each listening
socket and hands WebSocket upgrades on ``/acp`` to ``process_request`` / ``_handle``
here; plain HTTP goes to ``services.edge.transport.routes``. Both sides check the
token alike (401), the ``Origin`` against ``[gateway] allowed_origins`` (403), and
share the connection limit and each token's share of it (503,
``services.edge.transport.admission``). A revoked token's open connections are closed
(``services.edge.transport.revocation``), their running turns cancelled first.

Slow clients: what a WebSocket connection sends goes through its bounded
:class:`~services.edge.transport.outqueue.Outbox`, which closes a client that stops reading;
a Streamable HTTP connection has the same bounds (``...streamable.streams``). The process
around this server, ``acpgate edge``, is ``gateway.run_edge`` (it reloads, and balances).
"""

from __future__ import annotations

import asyncio
import http
import socket
import weakref
from collections.abc import Sequence
from functools import partial
from itertools import count
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from services.common.config import Config
from services.common.listeners import bind_listeners
from services.common.logs import get_logger
from services.common.protocol import WS_SUBPROTOCOL
from services.common.remote_transport import H_CONNECTION_ID
from services.edge.caller import Caller
from services.edge.tokens import TokenStore, TokenWatch, token_db_path
from services.edge.transport.admission import LiveConnections, token_share
from services.edge.transport.auth import (
    Authenticator,
    choose_subprotocol,
    extract_token,
    offered_subprotocols,
)
from services.edge.transport.balance import Balancer
from services.edge.transport.exchange import HttpRequest
from services.edge.transport.gateway_needs import RuntimeLike, ServeConnection, SessionLookup
from services.edge.transport.handoff.service import Handoff
from services.edge.transport.monitor import GatewayCounters, Monitor, join_workers
from services.edge.transport.origin import OriginPolicy
from services.edge.transport.outqueue import (
    DEFAULT_QUEUE_CHARS,
    DEFAULT_QUEUE_MESSAGES,
    DEFAULT_SLOW_CLIENT_TIMEOUT,
    Outbox,
)
from services.edge.transport.probe import ServiceProbe
from services.edge.transport.revocation import RevocationWatch
from services.edge.transport.routes import UNAUTHORIZED_BODY, GatewayRoutes
from services.edge.transport.server import (
    FrontDoor,
    WebSocketOptions,
    serve_front_door,
    tls_context,
)
from services.edge.transport.streamable.connection import StreamableConnection
from services.edge.transport.streamable.dialect import (
    affinity_cookie,
    log_reader,
    run_dialect,
    session_lookup,
)
from services.edge.transport.streamable.endpoint import EndpointSettings, StreamableEndpoint
from services.edge.transport.streamable.streams import Budget
from services.edge.transport.wiring import peer_name
from services.edge.transport.ws_incoming import Incoming

#: Close code when the connection limit was hit by a racing handshake.
BUSY_CLOSE_CODE = 1013
#: Close code and reason of the connections a stopping gateway closes (going away).
STOP_CLOSE_CODE = 1001
STOP_REASON = "server shutting down"
#: How long a stop waits for connections to answer what they read (drain 15 s + delivery).
STOP_WAIT_SECS = 20.0
#: The keepalive of a quiet SSE stream when ``[gateway] ping_interval_secs`` is 0.
SSE_KEEPALIVE_SECS = 15.0

log = get_logger("edge.ws")


def _first(headers: Headers, name: str) -> str | None:
    values = headers.get_all(name)
    return values[0] if values else None


class EdgeServer:
    """The gateway over one :class:`EdgeRuntime` (start, serve, stop)."""

    def __init__(
        self,
        cfg: Config,
        runtime: RuntimeLike,
        *,
        probe: ServiceProbe,
        serve_connection: ServeConnection | None = None,
        token_store: TokenStore | None = None,
        queue_chars: int = DEFAULT_QUEUE_CHARS,
        queue_messages: int = DEFAULT_QUEUE_MESSAGES,
        slow_client_timeout: float = DEFAULT_SLOW_CLIENT_TIMEOUT,
        close_timeout: float = 5.0,
        session_lookup_fn: SessionLookup | None = None, balancer: Balancer | None = None,
    ) -> None:
        if serve_connection is None:
            from services.edge.transport.connection import serve_connection as default_serve

            serve_connection = default_serve
        self.cfg = cfg
        self.runtime = runtime
        self.probe = probe
        self._serve_connection = serve_connection
        store = token_store if token_store is not None else TokenStore(token_db_path(cfg))
        gw = cfg.gateway
        self._auth = Authenticator(store, require_auth=gw.require_auth)
        self._queue_chars = queue_chars
        self._queue_messages = queue_messages
        self._slow_client_timeout = slow_client_timeout
        self._close_timeout = close_timeout
        prefix = gw.path_prefix
        self.acp_path = f"{prefix}/acp"
        self._live: LiveConnections[Any] = LiveConnections(
            gw.max_connections, token_share(gw))
        self._revocations = RevocationWatch(TokenWatch(store.path), self._live, runtime,
                                            close_other=self._close_revoked)
        self._watching: asyncio.Task[None] | None = None
        #: Who each admitted handshake acts as, from process_request to _handle, and the
        #: Acp-Connection-Id its 101 carries.
        self._callers: weakref.WeakKeyDictionary[ServerConnection, tuple[Caller, str]] = (
            weakref.WeakKeyDictionary())
        self._ids = count(1)
        self._counters = GatewayCounters()
        self._origins = OriginPolicy(gw.allowed_origins, tls=gw.tls.enabled)
        self._cookie = affinity_cookie(getattr(runtime, "gateway_instance_id", ""),
                                       tls=gw.tls.enabled)
        self._handoff, self._balancer = Handoff(cfg, runtime, balancer), balancer  # workers
        #: One front door per listening socket (an address of the host).
        self._doors: list[FrontDoor] = []
        #: Set when the gateway stops: each connection winds down (serve_connection).
        self._stopping = asyncio.Event()
        #: The running connection handlers (a stop waits for them, boundedly).
        self._handlers: set[asyncio.Task[Any]] = set()
        keepalive = float(gw.ping_interval_secs) if gw.ping_interval_secs > 0 \
            else SSE_KEEPALIVE_SECS
        self.http = StreamableEndpoint(
            EndpointSettings(float(gw.idle_secs), keepalive, slow_client_timeout,
                             partial(Budget, queue_chars, queue_messages)),
            self._live, run_dialect=self._run_http,
            knows_session=session_lookup_fn or session_lookup(runtime),
            cookie=lambda request: [("set-cookie", self._cookie)],
            on_slow_client=self._count_http_slow_client, stopping=self._stopping,
            new_id=self._handoff.new_id, read_log=log_reader(runtime))
        self._monitor = Monitor(probe, lambda: self.runtime.metrics, self._counters, self._live,
                                lambda: len(self.http.connections), lambda: self.http.readers,
                                lambda: self._revocations.closes_total)
        join_workers(getattr(runtime, "workers", None), self._live, self._monitor, balancer)
        self._routes = GatewayRoutes(
            self.acp_path, frozenset({"/healthz", f"{prefix}/healthz"}),
            frozenset({"/metrics", f"{prefix}/metrics"}), self._monitor.health,
            self._monitor.metrics, self._authenticate_http, self._origins, self.http)
        self.port = 0
        #: The most characters any one connection ever had queued (diagnostics, tests).
        self.peak_queue_chars = 0
        #: The most sends any one connection ever had waiting behind its full queue.
        self.peak_waiting = 0

    def use_config(self, cfg: Config) -> None:
        """A reloaded config: its connection limits hold for the next connections."""
        self.cfg, self._live.max_connections = cfg, cfg.gateway.max_connections
        self._live.per_token = token_share(cfg.gateway)

    async def start(self, listeners: Sequence[socket.socket] = ()) -> None:
        """Serve on ``listeners`` (sockets already listening: what ``acpgate serve``
        bound), else bind ``[gateway] host``/``port`` first (port 0 picks a free port, see
        :attr:`port`; a port in use is ``AddressInUse``, raised before anything serves)."""
        gw = self.cfg.gateway
        bound_here = not listeners
        if bound_here:
            listeners = await asyncio.to_thread(bind_listeners, gw.host, gw.port)
        ping = float(gw.ping_interval_secs) if gw.ping_interval_secs > 0 else None
        ws = WebSocketOptions(self._handle, self._process_request, self._process_response,
                              self._select_subprotocol, gw.max_frame_bytes, ping,
                              self._close_timeout, gw.compression)
        try:
            context = await asyncio.to_thread(tls_context, self.cfg)
            for sock in listeners:
                self._doors.append(await serve_front_door(
                    sock, app=self._routes, websocket_path=self.acp_path, ws=ws,
                    max_body=gw.max_frame_bytes, tls=context, balancer=self._balancer))
            await self._handoff.start(self._doors)
        except BaseException:
            await self.stop()
            if bound_here:  # the ones no server took yet (closing a closed one is a no-op)
                for sock in listeners:
                    sock.close()
            raise
        self.port = listeners[0].getsockname()[1] if listeners else gw.port
        if gw.require_auth:
            self._watching = asyncio.create_task(self._revocations.run())
        log.info("edge_listening", host=gw.host, port=self.port, path=self.acp_path,
                 tls=self.cfg.gateway.tls.enabled, require_auth=gw.require_auth)

    @property
    def url(self) -> str:
        """The ``ws[s]://`` URL of ``/acp`` on this server."""
        scheme = "wss" if self.cfg.gateway.tls.enabled else "ws"
        return f"{scheme}://{self.cfg.gateway.host}:{self.port}{self.acp_path}"

    @property
    def http_url(self) -> str:
        """The ``http[s]://`` URL of ``/acp`` (Streamable HTTP) on this server."""
        scheme = "https" if self.cfg.gateway.tls.enabled else "http"
        return f"{scheme}://{self.cfg.gateway.host}:{self.port}{self.acp_path}"

    @property
    def connection_count(self) -> int:
        """Open client connections (WebSocket and Streamable HTTP)."""
        return len(self._live)

    @property
    def slow_client_closes(self) -> int:
        """Connections closed so far because their client stopped reading."""
        return self._counters.slow_client_closes_total

    async def stop(self) -> None:
        """Stop accepting; let every connection cancel its running turns and answer what it
        read — its client gets each prompt's ``cancelled`` result before the close — at
        most :data:`STOP_WAIT_SECS`; close every connection (1001) and wait for their
        sessions to be released. What it waits for is logged."""
        if not self._doors:
            return
        doors = await self.stop_accepting()  # no new connection; those open wind down
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        handlers = {task for task in self._handlers | self.http.tasks if not task.done()}
        log.info("edge_stopping", connections=len(handlers), wait_secs=STOP_WAIT_SECS)
        self._stopping.set()
        if handlers:
            _, late = await asyncio.wait(handlers, timeout=STOP_WAIT_SECS)
            if late:
                log.warning("edge_stop_closing_late_connections", connections=len(late))
            # Not wound down in time: closed now (their sessions released as on any close).
            self.http.close_all("gateway stopping")
            await asyncio.gather(*(ws.close(STOP_CLOSE_CODE, STOP_REASON)
                                   for door in doors for ws in list(door.server.connections)),
                                 return_exceptions=True)
        for door in doors:
            door.close_http()
        tasks = {t for door in doors for t in door.wiring.tasks if not t.done()}
        if tasks:
            await asyncio.wait(tasks, timeout=self._close_timeout)
        for door in doors:
            await door.server.wait_closed()
        log.info("edge_stopped", waited_secs=round(loop.time() - started, 2))

    async def stop_accepting(self) -> list[FrontDoor]:
        """No new connection or hand-over here (those open stay); the doors let go."""
        doors, self._doors = self._doors, []
        await self._handoff.close()
        for door in doors:
            door.server.close(close_connections=False)
        return doors

    # ------------------------------------------------------------ who may connect

    async def _authenticate_http(self, request: HttpRequest) -> Caller | None:
        token = extract_token(request.headers.get("authorization"), (), request.target)
        caller = await self._auth.caller(token)
        if caller is None:
            self._counters.rejected_unauthorized_total += 1
            log.warning("http_unauthorized", remote=request.remote,
                        source=token.source.value if token else "none")
        return caller

    def _select_subprotocol(self, connection: ServerConnection,
                            subprotocols: Any) -> Subprotocol | None:
        chosen = choose_subprotocol(subprotocols, WS_SUBPROTOCOL)
        return Subprotocol(chosen) if chosen is not None else None

    async def _process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        if urlsplit(request.path).path != self.acp_path:
            return connection.respond(http.HTTPStatus.NOT_FOUND, "Not Found\n")
        if not self._origins.admits(*(_first(request.headers, h) for h in ("Origin", "Host"))):
            log.warning("ws_origin_refused", remote=peer_name(connection.transport))
            return connection.respond(http.HTTPStatus.FORBIDDEN, "Origin not allowed\n")
        token = extract_token(
            _first(request.headers, "Authorization"),
            offered_subprotocols(request.headers.get_all("Sec-WebSocket-Protocol")),
            request.path,
        )
        caller = await self._auth.caller(token)
        if caller is None:
            self._counters.rejected_unauthorized_total += 1
            log.warning("ws_unauthorized", remote=peer_name(connection.transport),
                        source=token.source.value if token else "none")
            response = connection.respond(http.HTTPStatus.UNAUTHORIZED, UNAUTHORIZED_BODY)
            response.headers["WWW-Authenticate"] = 'Bearer realm="acpgate"'
            return response
        refusal = self._live.refusal(caller.token_id)
        if refusal is not None:
            log.warning("ws_" + refusal.reason, limit=refusal.limit)
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, refusal.body)
        self._callers[connection] = (caller, self._handoff.new_id())
        return None

    def _process_response(self, connection: ServerConnection, request: Request,
                          response: Response) -> Response | None:
        """The 101 names the connection (``Acp-Connection-Id``) and sets the affinity cookie."""
        admitted = self._callers.get(connection)
        if admitted is not None and response.status_code == http.HTTPStatus.SWITCHING_PROTOCOLS:
            response.headers[H_CONNECTION_ID] = admitted[1]
            response.headers["Set-Cookie"] = self._cookie
        return None

    # ------------------------------------------------------------ WebSocket side

    async def _handle(self, ws: ServerConnection) -> None:
        conn_id = next(self._ids)
        admitted = self._callers.pop(ws, None)
        if admitted is None:  # never admitted by process_request: nobody to act for
            await ws.close(1011, "internal error")
            return
        caller, acp_id = admitted
        token_id = caller.token_id
        refusal = await self._live.admit(ws, token_id)
        if refusal is not None:  # handshakes raced past process_request, or other workers'
            await ws.close(BUSY_CLOSE_CODE, refusal.reason.replace("_", " "))
            return
        self._counters.connections_total += 1
        query = parse_qs(urlsplit(ws.request.path if ws.request else "").query)
        default_agent = next((a.strip() for a in query.get("agent", []) if a.strip()), "")
        log.info("ws_open", conn=conn_id, acp_conn=acp_id[:8], remote=peer_name(ws.transport),
                 agent=default_agent or None,
                 subprotocol=ws.subprotocol if ws.subprotocol == WS_SUBPROTOCOL else None)
        outbox = Outbox(ws, conn_id=conn_id, max_chars=self._queue_chars,
                        max_messages=self._queue_messages,
                        slow_client_timeout=self._slow_client_timeout,
                        close_timeout=self._close_timeout, on_slow_client=self._count_slow_client)
        incoming = Incoming(ws, outbox)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            await self._serve_connection(
                self.runtime, incoming.frames(), outbox.send, default_agent=default_agent,
                caller=caller, remote=True, send_many=outbox.send_many,
                revoked=self._revocations.signal(ws), stopping=self._stopping,
            )
            if self._stopping.is_set():  # what it answered goes out before the close
                await outbox.flush(self._close_timeout)
                await ws.close(STOP_CLOSE_CODE, STOP_REASON)
        except Exception:
            log.exception("ws_connection_failed", conn=conn_id)
            await ws.close(1011, "internal error")
        finally:
            self.peak_queue_chars = max(self.peak_queue_chars, outbox.queue.peak_chars)
            self.peak_waiting = max(self.peak_waiting, outbox.queue.peak_waiting)
            await outbox.aclose()
            self._live.discard(ws)
            log.info("ws_closed", conn=conn_id, code=ws.close_code, received=incoming.count)

    def _count_slow_client(self) -> None:
        self._counters.slow_client_closes_total += 1

    # ------------------------------------------------------------ Streamable HTTP side

    async def _run_http(self, conn: StreamableConnection, agent: str) -> None:
        self._counters.http_connections_total += 1
        await run_dialect(conn, agent, runtime=self.runtime,
                          serve_connection=self._serve_connection,
                          revoked=self._revocations.signal(conn), stopping=self._stopping,
                          flush_secs=self._close_timeout)

    def _count_http_slow_client(self) -> None:
        self._counters.slow_client_closes_total += 1
        self._counters.http_slow_client_closes_total += 1

    async def _close_revoked(self, conn: Any) -> None:
        if isinstance(conn, StreamableConnection):
            conn.close("token revoked")
