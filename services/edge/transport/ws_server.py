"""The WebSocket gateway: ``ws[s]://host:port<path_prefix>/acp`` (SPEC §11).

One connection is one dialect server (``serve_connection``) with its own
``zc-out-`` counter and its own sessions; a disconnect releases them. Before
the upgrade, ``process_request`` routes plain HTTP (``/healthz``, ``/metrics``),
answers 404 for unknown paths, 401 for a missing or bad token and 503 when
the connection limit or the token's share of it is reached
(``services.edge.transport.admission``). A token revoked while its connections are open
closes them with 1008 (``services.edge.transport.revocation``), their running turns
cancelled first (``serve_connection``'s ``revoked``).

Slow clients: everything a connection sends goes through its bounded
:class:`~services.edge.transport.outqueue.Outbox`, which closes a client that stops
reading (``services.edge.transport.outqueue``). The process around this server, the
``acpgate edge`` command, is ``services.edge.transport.gateway.run_edge``.
"""

from __future__ import annotations

import asyncio
import http
import socket
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from services.common.config import Config
from services.common.listeners import bind_listeners
from services.common.logs import get_logger
from services.common.protocol import WS_SUBPROTOCOL
from services.edge.caller import Caller
from services.edge.metrics import Metrics
from services.edge.tokens import TokenStore, TokenWatch, token_db_path
from services.edge.transport.admission import LiveConnections, token_share
from services.edge.transport.auth import (
    Authenticator,
    choose_subprotocol,
    extract_token,
    offered_subprotocols,
)
from services.edge.transport.http import (
    JSON_CONTENT_TYPE,
    PROMETHEUS_CONTENT_TYPE,
    GatewayGauges,
    HealthReport,
    render_metrics,
)
from services.edge.transport.outqueue import (
    DEFAULT_QUEUE_CHARS,
    DEFAULT_QUEUE_MESSAGES,
    DEFAULT_SLOW_CLIENT_TIMEOUT,
    Outbox,
)
from services.edge.transport.probe import ServiceProbe
from services.edge.transport.revocation import RevocationWatch
from services.edge.transport.ws_incoming import Incoming

#: Close code when the connection limit was hit by a racing handshake.
BUSY_CLOSE_CODE = 1013
#: Close code and reason of the connections a stopping gateway closes (going away).
STOP_CLOSE_CODE = 1001
STOP_REASON = "server shutting down"
#: How long a stop waits for connections to answer what they read (drain 15 s + delivery).
STOP_WAIT_SECS = 20.0

log = get_logger("edge.ws")


# --------------------------------------------------------------------- dependencies


class RuntimeLike(Protocol):
    """What the gateway needs of ``services.edge.transport.connection.EdgeRuntime``."""

    metrics: Metrics


class ServeConnection(Protocol):
    """The shape of ``services.edge.transport.connection.serve_connection``."""

    def __call__(
        self,
        runtime: Any,
        incoming: AsyncIterator[str],
        send: Callable[[str], Awaitable[None]],
        *,
        default_agent: str = "",
        caller: Caller,
        remote: bool = False,
        send_many: Callable[[list[str]], Awaitable[None]] | None = None,
        revoked: asyncio.Event | None = None,
        stopping: asyncio.Event | None = None,
    ) -> Awaitable[None]:
        """Serve one connection until ``incoming`` ends, or — once ``stopping`` is set —
        until its turns are cancelled and what it read is answered."""
        ...


# --------------------------------------------------------------------- the server


@dataclass
class _Counters:
    connections_total: int = 0
    rejected_unauthorized_total: int = 0
    slow_client_closes_total: int = 0


def _respond(connection: ServerConnection, status: int, body: str,
             content_type: str) -> Response:
    """A plain-HTTP answer with ``content_type`` in place of websockets' text/plain default."""
    response = connection.respond(status, body)
    del response.headers["Content-Type"]
    response.headers["Content-Type"] = content_type
    return response


def _first(headers: Headers, name: str) -> str | None:
    values = headers.get_all(name)
    return values[0] if values else None


def tls_context(cfg: Config) -> ssl.SSLContext | None:
    """A server TLS context from ``[gateway.tls]``, or ``None`` for plain ``ws://``."""
    tls = cfg.gateway.tls
    if not tls.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


class EdgeServer:
    """The WebSocket gateway over one :class:`EdgeRuntime` (start, serve, stop)."""

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
    ) -> None:
        if serve_connection is None:
            from services.edge.transport.connection import serve_connection as default_serve

            serve_connection = default_serve
        self.cfg = cfg
        self.runtime = runtime
        self.probe = probe
        self._serve_connection = serve_connection
        store = token_store if token_store is not None else TokenStore(token_db_path(cfg))
        self._auth = Authenticator(store, require_auth=cfg.gateway.require_auth)
        self._queue_chars = queue_chars
        self._queue_messages = queue_messages
        self._slow_client_timeout = slow_client_timeout
        self._close_timeout = close_timeout
        prefix = cfg.gateway.path_prefix
        self.acp_path = f"{prefix}/acp"
        self._health_paths = {"/healthz", f"{prefix}/healthz"}
        self._metrics_paths = {"/metrics", f"{prefix}/metrics"}
        self._live: LiveConnections[ServerConnection] = LiveConnections(
            cfg.gateway.max_connections, token_share(cfg.gateway))
        self._revocations = RevocationWatch(TokenWatch(store.path), self._live)
        self._watching: asyncio.Task[None] | None = None
        #: Who each admitted handshake acts as, from process_request to _handle.
        self._callers: weakref.WeakKeyDictionary[ServerConnection, Caller] = (
            weakref.WeakKeyDictionary())
        self._ids = count(1)
        self._counters = _Counters()
        #: One websockets server per listening socket (an address of the host).
        self._servers: list[Server] = []
        #: Set when the gateway stops: each connection winds down (serve_connection).
        self._stopping = asyncio.Event()
        #: The running connection handlers (a stop waits for them, boundedly).
        self._handlers: set[asyncio.Task[Any]] = set()
        self.port = 0
        #: The most characters any one connection ever had queued (diagnostics, tests).
        self.peak_queue_chars = 0
        #: The most sends any one connection ever had waiting behind its full queue.
        self.peak_waiting = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self, listeners: Sequence[socket.socket] = ()) -> None:
        """Serve on ``listeners`` (sockets already listening: what ``acpgate serve``
        bound), else bind ``[gateway] host``/``port`` first (port 0 picks a free port, see
        :attr:`port`; a port in use is ``AddressInUse``, raised before anything serves)."""
        gw = self.cfg.gateway
        bound_here = not listeners
        if bound_here:
            listeners = await asyncio.to_thread(bind_listeners, gw.host, gw.port)
        ping = float(gw.ping_interval_secs) if gw.ping_interval_secs > 0 else None
        try:
            context = await asyncio.to_thread(tls_context, self.cfg)
            for sock in listeners:
                self._servers.append(await serve(
                    self._handle,
                    sock=sock,
                    process_request=self._process_request,
                    select_subprotocol=self._select_subprotocol,
                    ssl=context,
                    max_size=gw.max_frame_bytes,
                    ping_interval=ping,
                    ping_timeout=ping,
                    close_timeout=self._close_timeout,
                    # permessage-deflate costs both ends CPU per frame; small JSON frames gain little.
                    compression="deflate" if gw.compression else None,
                ))
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
    def connection_count(self) -> int:
        """Open WebSocket connections."""
        return len(self._live)

    @property
    def slow_client_closes(self) -> int:
        """Connections closed so far because their client stopped reading."""
        return self._counters.slow_client_closes_total

    async def stop(self) -> None:
        """Stop accepting; let every connection cancel its running turns and answer what it
        read — its client gets each prompt's ``cancelled`` result before the close — at
        most :data:`STOP_WAIT_SECS`; close every connection (1001) and wait for their
        sessions to be released. What it waits for is logged (issue 24)."""
        if not self._servers:
            return
        servers, self._servers = self._servers, []
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for server in servers:  # no new connection; those open wind down
            server.close(close_connections=False)
        handlers = {task for task in self._handlers if not task.done()}
        log.info("edge_stopping", connections=len(handlers), wait_secs=STOP_WAIT_SECS)
        self._stopping.set()
        if handlers:
            _, late = await asyncio.wait(handlers, timeout=STOP_WAIT_SECS)
            if late:
                log.warning("edge_stop_closing_late_connections", connections=len(late))
            # Not wound down in time: closed now (their sessions released as on any close).
            await asyncio.gather(*(ws.close(STOP_CLOSE_CODE, STOP_REASON)
                                   for server in servers for ws in list(server.connections)),
                                 return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        log.info("edge_stopped", waited_secs=round(loop.time() - started, 2))

    # ------------------------------------------------------------ HTTP side

    def _select_subprotocol(
        self, connection: ServerConnection, subprotocols: Any
    ) -> Subprotocol | None:
        chosen = choose_subprotocol(subprotocols, WS_SUBPROTOCOL)
        return Subprotocol(chosen) if chosen is not None else None

    async def _process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        path = urlsplit(request.path).path
        if path in self._health_paths:
            return await self._healthz(connection)
        if path in self._metrics_paths:
            return await self._metrics(connection)
        if path != self.acp_path:
            return connection.respond(http.HTTPStatus.NOT_FOUND, "Not Found\n")
        token = extract_token(
            _first(request.headers, "Authorization"),
            offered_subprotocols(request.headers.get_all("Sec-WebSocket-Protocol")),
            request.path,
        )
        caller = await self._auth.caller(token)
        if caller is None:
            self._counters.rejected_unauthorized_total += 1
            log.warning("ws_unauthorized", remote=_remote(connection),
                        source=token.source.value if token else "none")
            response = connection.respond(
                http.HTTPStatus.UNAUTHORIZED,
                "Unauthorized: send a gateway token as 'Authorization: Bearer <token>', "
                "a 'bearer.<token>' subprotocol entry, or '?token=<token>'.\n",
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="acpgate"'
            return response
        refusal = self._live.refusal(caller.token_id)
        if refusal is not None:
            log.warning("ws_" + refusal.reason, limit=refusal.limit)
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, refusal.body)
        self._callers[connection] = caller
        return None

    async def _healthz(self, connection: ServerConnection) -> Response:
        report = HealthReport(services=await self.probe.health())
        return _respond(connection, report.status_code, report.body(), JSON_CONTENT_TYPE)

    async def _metrics(self, connection: ServerConnection) -> Response:
        health, leases = await asyncio.gather(self.probe.health(), self.probe.leases_by_state())
        gauges = GatewayGauges(
            connections=len(self._live),
            connections_total=self._counters.connections_total,
            rejected_unauthorized_total=self._counters.rejected_unauthorized_total,
            rejected_busy=dict(self._live.rejected),
            slow_client_closes_total=self._counters.slow_client_closes_total,
            revoked_closes_total=self._revocations.closes_total,
            leases=leases,
            services_up={name: int(state == "SERVING") for name, state in health.items()},
        )
        return _respond(connection, http.HTTPStatus.OK,
                        render_metrics(self.runtime.metrics, gauges), PROMETHEUS_CONTENT_TYPE)

    # ------------------------------------------------------------ WebSocket side

    async def _handle(self, ws: ServerConnection) -> None:
        conn_id = next(self._ids)
        caller = self._callers.pop(ws, None)
        if caller is None:  # never admitted by process_request: nobody to act for
            await ws.close(1011, "internal error")
            return
        token_id = caller.token_id
        refusal = self._live.refusal(token_id)
        if refusal is not None:
            # Two handshakes raced past the check in process_request.
            await ws.close(BUSY_CLOSE_CODE, refusal.reason.replace("_", " "))
            return
        self._live.add(ws, token_id)
        self._counters.connections_total += 1
        query = parse_qs(urlsplit(ws.request.path if ws.request else "").query)
        default_agent = next((a.strip() for a in query.get("agent", []) if a.strip()), "")
        log.info("ws_open", conn=conn_id, remote=_remote(ws), agent=default_agent or None,
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


def _remote(ws: ServerConnection) -> str:
    try:
        host, port = ws.remote_address[:2]
    except (TypeError, ValueError):
        return "?"
    return f"{host}:{port}"
