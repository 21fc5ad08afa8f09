"""The WebSocket gateway: ``ws[s]://host:port<path_prefix>/acp`` (SPEC §11).

One connection is one dialect server (``serve_connection``) with its own
``zc-out-`` counter and its own sessions; a disconnect releases them. Before
the upgrade, ``process_request`` routes plain HTTP (``/healthz``, ``/metrics``),
answers 404 for unknown paths, 401 for a missing or bad token and 503 when
the connection limit is reached.

Slow clients: everything a connection sends goes through a per-connection
:class:`OutgoingQueue` bounded in bytes and messages. When it is full,
``send`` waits (backpressure on that connection's relay only); if the client
still does not read within ``slow_client_timeout`` the connection is closed
with :data:`SLOW_CLIENT_CLOSE_CODE`, so a client that stops reading can never
grow the edge's memory without bound.
"""

from __future__ import annotations

import asyncio
import http
import ssl
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from itertools import count
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from acpgate.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.addresses import LIFECYCLE_SERVICE, SESSION_SERVICE, with_service_addresses
from services.common.config import Config
from services.common.grpc_auth import grpc_security, open_service_channel
from services.common.logs import get_logger
from services.common.protocol import WS_SUBPROTOCOL
from services.common.signals import install_stop_signals
from services.edge.auth import (
    BEARER_SUBPROTOCOL_PREFIX,
    Authenticator,
    extract_token,
    offered_subprotocols,
)
from services.edge.http import (
    JSON_CONTENT_TYPE,
    PROMETHEUS_CONTENT_TYPE,
    GatewayGauges,
    HealthReport,
    render_metrics,
)
from services.edge.metrics import Metrics
from services.edge.tokens import TokenStore, token_db_path

#: Close code for a client that stopped reading (policy violation) and its reason.
SLOW_CLIENT_CLOSE_CODE = 1008
SLOW_CLIENT_REASON = "slow client: outgoing queue full"
#: Close code when the connection limit was hit by a racing handshake.
BUSY_CLOSE_CODE = 1013
#: Per-connection outgoing budget in characters and messages (a single larger message is
#: still accepted alone, so one 10 MiB blob frame passes).
DEFAULT_QUEUE_CHARS = 8 * 1024 * 1024
DEFAULT_QUEUE_MESSAGES = 1024
DEFAULT_SLOW_CLIENT_TIMEOUT = 30.0

log = get_logger("edge.ws")


# --------------------------------------------------------------------- the outgoing queue


class PutResult(Enum):
    """What happened to a message offered to an :class:`OutgoingQueue`."""

    QUEUED = "queued"
    CLOSED = "closed"
    TIMED_OUT = "timed_out"


class OutgoingQueue:
    """A FIFO bounded in characters and messages; ``put`` waits for room.

    The common case costs no lock, timer or task: a message that fits is
    appended at once and the pump is woken through an Event. Only a put that
    does not fit waits, in FIFO order among waiting puts (a large message is not
    overtaken forever by small ones), and the getter hands room to the oldest
    waiter directly.
    """

    def __init__(self, max_chars: int = DEFAULT_QUEUE_CHARS,
                 max_messages: int = DEFAULT_QUEUE_MESSAGES) -> None:
        self.max_chars = max_chars
        self.max_messages = max_messages
        self._items: deque[str] = deque()
        self._chars = 0
        #: Set while something is queued (or the queue closed): what ``get`` waits on.
        self._data = asyncio.Event()
        #: Puts that did not fit, oldest first: (their future, message, size).
        self._waiters: deque[tuple[asyncio.Future[PutResult], str, int]] = deque()
        self.closed = False
        #: The most characters ever queued at once (for tests and diagnostics).
        self.peak_chars = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def chars(self) -> int:
        """Characters queued now."""
        return self._chars

    def _fits(self, size: int) -> bool:
        # An empty queue accepts any single message, so one large frame still passes.
        if not self._items:
            return True
        return self._chars + size <= self.max_chars and len(self._items) < self.max_messages

    def _append(self, message: str, size: int) -> None:
        self._items.append(message)
        self._chars += size
        if self._chars > self.peak_chars:
            self.peak_chars = self._chars
        self._data.set()

    def _admit_waiters(self) -> None:
        """Move waiting puts into the queue, oldest first, while they fit."""
        waiters = self._waiters
        while waiters:
            fut, message, size = waiters[0]
            if fut.done():  # timed out or cancelled meanwhile
                waiters.popleft()
                continue
            if not self._fits(size):
                return
            waiters.popleft()
            self._append(message, size)
            fut.set_result(PutResult.QUEUED)

    async def put(self, message: str, wait_secs: float) -> PutResult:
        """Queue ``message``, waiting up to ``wait_secs`` seconds for room."""
        if self.closed:
            return PutResult.CLOSED
        size = len(message)
        if not self._waiters and self._fits(size):
            self._append(message, size)
            return PutResult.QUEUED
        fut: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, message, size))
        try:
            return await asyncio.wait_for(fut, wait_secs)
        except TimeoutError:
            return PutResult.TIMED_OUT

    def get_nowait(self) -> str | None:
        """The next message if one is queued (and the queue is open), else ``None``."""
        if self.closed or not self._items:
            return None
        message = self._items.popleft()
        self._chars -= len(message)
        if self._waiters:
            self._admit_waiters()
        return message

    async def get(self) -> str | None:
        """The next message, or ``None`` once closed (queued messages are dropped then)."""
        while True:
            if self.closed:
                return None
            if self._items:
                return self.get_nowait()
            self._data.clear()
            await self._data.wait()

    async def close(self) -> None:
        """Wake every waiter; later puts answer CLOSED, gets answer None."""
        self.closed = True
        self._items.clear()
        self._chars = 0
        self._data.set()
        while self._waiters:
            fut, _, _ = self._waiters.popleft()
            if not fut.done():
                fut.set_result(PutResult.CLOSED)


# --------------------------------------------------------------------- dependencies


class RuntimeLike(Protocol):
    """What the gateway needs of ``services.edge.connection.EdgeRuntime``."""

    metrics: Metrics


class ServeConnection(Protocol):
    """The shape of ``services.edge.connection.serve_connection``."""

    def __call__(
        self,
        runtime: Any,
        incoming: AsyncIterator[str],
        send: Callable[[str], Awaitable[None]],
        *,
        default_agent: str = "",
        principal: str = "",
    ) -> Awaitable[None]:
        """Serve one connection until ``incoming`` ends."""
        ...


class ServiceProbe:
    """gRPC health of both services and lease counts, for ``/healthz`` and ``/metrics``."""

    def __init__(self, cfg: Config, session_addr: str, lifecycle_addr: str) -> None:
        sec = grpc_security(cfg)
        self._channels = {
            "session": (open_service_channel(sec, session_addr), SESSION_SERVICE),
            "lifecycle": (open_service_channel(sec, lifecycle_addr), LIFECYCLE_SERVICE),
        }

    async def _check(self, channel: grpc.aio.Channel, service: str) -> str:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2.0
            )
        except grpc.aio.AioRpcError:
            return "UNREACHABLE"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def health(self) -> dict[str, str]:
        """service name → serving status."""
        names = list(self._channels)
        states = await asyncio.gather(*(self._check(*self._channels[n]) for n in names))
        return dict(zip(names, states, strict=True))

    async def leases_by_state(self) -> dict[str, int] | None:
        """Lease counts by lowercase state name, or ``None`` when the service is unreachable."""
        channel = self._channels["lifecycle"][0]
        try:
            reply = await lifecycle_pb2_grpc.LifecycleServiceStub(channel).ListLeases(
                lifecycle_pb2.ListLeasesRequest(), timeout=3.0
            )
        except grpc.aio.AioRpcError:
            return None
        out: dict[str, int] = {}
        for lease in reply.leases:
            name = lifecycle_pb2.LeaseState.Name(lease.state).removeprefix("LEASE_STATE_").lower()
            out[name] = out.get(name, 0) + 1
        return out

    async def close(self) -> None:
        """Close both channels."""
        for channel, _ in self._channels.values():
            await channel.close(grace=None)


# --------------------------------------------------------------------- the server


@dataclass
class _Counters:
    connections_total: int = 0
    rejected_unauthorized_total: int = 0
    rejected_busy_total: int = 0
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
            from services.edge.connection import serve_connection as default_serve

            serve_connection = default_serve
        self.cfg = cfg
        self.runtime = runtime
        self.probe = probe
        self._serve_connection = serve_connection
        self._auth = Authenticator(
            token_store if token_store is not None else TokenStore(token_db_path(cfg)),
            require_auth=cfg.gateway.require_auth,
        )
        self._queue_chars = queue_chars
        self._queue_messages = queue_messages
        self._slow_client_timeout = slow_client_timeout
        self._close_timeout = close_timeout
        prefix = cfg.gateway.path_prefix
        self.acp_path = f"{prefix}/acp"
        self._health_paths = {"/healthz", f"{prefix}/healthz"}
        self._metrics_paths = {"/metrics", f"{prefix}/metrics"}
        self._active: set[ServerConnection] = set()
        #: Who each admitted handshake acts as, from process_request to _handle.
        self._principals: weakref.WeakKeyDictionary[ServerConnection, str] = (
            weakref.WeakKeyDictionary())
        self._ids = count(1)
        self._counters = _Counters()
        self._server: Server | None = None
        self.port = 0
        #: The most characters any one connection ever had queued (diagnostics, tests).
        self.peak_queue_chars = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind and start accepting (port 0 picks a free port, see :attr:`port`)."""
        gw = self.cfg.gateway
        ping = float(gw.ping_interval_secs) if gw.ping_interval_secs > 0 else None
        self._server = await serve(
            self._handle,
            gw.host,
            gw.port,
            process_request=self._process_request,
            select_subprotocol=self._select_subprotocol,
            ssl=await asyncio.to_thread(tls_context, self.cfg),
            max_size=gw.max_frame_bytes,
            ping_interval=ping,
            ping_timeout=ping,
            close_timeout=self._close_timeout,
            # permessage-deflate costs both ends CPU per frame; small JSON frames gain little.
            compression="deflate" if gw.compression else None,
        )
        sockets = list(self._server.sockets)
        self.port = sockets[0].getsockname()[1] if sockets else gw.port
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
        return len(self._active)

    @property
    def slow_client_closes(self) -> int:
        """Connections closed so far because their client stopped reading."""
        return self._counters.slow_client_closes_total

    async def stop(self) -> None:
        """Stop accepting, close every connection (1001), wait for their sessions to be released."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close(close_connections=True)
        await server.wait_closed()
        log.info("edge_stopped")

    # ------------------------------------------------------------ HTTP side

    def _select_subprotocol(
        self, connection: ServerConnection, subprotocols: Any
    ) -> Subprotocol | None:
        offered = list(subprotocols)
        if WS_SUBPROTOCOL in offered:
            return Subprotocol(WS_SUBPROTOCOL)
        # A browser that offered only its bearer entry must get one of its offers back.
        for proto in offered:
            if proto.startswith(BEARER_SUBPROTOCOL_PREFIX):
                return Subprotocol(proto)
        return None

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
        principal = await self._auth.principal(token)
        if principal is None:
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
        if len(self._active) >= self.cfg.gateway.max_connections:
            self._counters.rejected_busy_total += 1
            log.warning("ws_too_many_connections", limit=self.cfg.gateway.max_connections)
            return connection.respond(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"Too many connections (limit {self.cfg.gateway.max_connections})\n",
            )
        self._principals[connection] = principal
        return None

    async def _healthz(self, connection: ServerConnection) -> Response:
        report = HealthReport(services=await self.probe.health())
        return _respond(connection, report.status_code, report.body(), JSON_CONTENT_TYPE)

    async def _metrics(self, connection: ServerConnection) -> Response:
        health, leases = await asyncio.gather(self.probe.health(), self.probe.leases_by_state())
        gauges = GatewayGauges(
            connections=len(self._active),
            connections_total=self._counters.connections_total,
            rejected_unauthorized_total=self._counters.rejected_unauthorized_total,
            rejected_busy_total=self._counters.rejected_busy_total,
            slow_client_closes_total=self._counters.slow_client_closes_total,
            leases=leases,
            services_up={name: int(state == "SERVING") for name, state in health.items()},
        )
        return _respond(connection, http.HTTPStatus.OK,
                        render_metrics(self.runtime.metrics, gauges), PROMETHEUS_CONTENT_TYPE)

    # ------------------------------------------------------------ WebSocket side

    async def _handle(self, ws: ServerConnection) -> None:
        conn_id = next(self._ids)
        if len(self._active) >= self.cfg.gateway.max_connections:
            # Two handshakes raced past the check in process_request.
            self._counters.rejected_busy_total += 1
            await ws.close(BUSY_CLOSE_CODE, "too many connections")
            return
        self._active.add(ws)
        self._counters.connections_total += 1
        query = parse_qs(urlsplit(ws.request.path if ws.request else "").query)
        default_agent = next((a.strip() for a in query.get("agent", []) if a.strip()), "")
        log.info("ws_open", conn=conn_id, remote=_remote(ws), agent=default_agent or None,
                 subprotocol=ws.subprotocol if ws.subprotocol == WS_SUBPROTOCOL else None)
        queue = OutgoingQueue(self._queue_chars, self._queue_messages)
        closing: list[asyncio.Task[None]] = []

        async def pump() -> None:
            try:
                while (message := await queue.get()) is not None:
                    await ws.send(message)
                    # Everything already queued goes out before waiting again.
                    while (message := queue.get_nowait()) is not None:
                        await ws.send(message)
            except ConnectionClosed:
                pass
            finally:
                await queue.close()  # later sends are dropped at once, never block

        async def send(message: str) -> None:
            result = await queue.put(message, self._slow_client_timeout)
            if result is PutResult.TIMED_OUT and not closing:
                self._counters.slow_client_closes_total += 1
                log.warning("ws_slow_client", conn=conn_id, queued_chars=queue.peak_chars)
                await queue.close()
                closing.append(asyncio.create_task(self._close_slow(ws)))
            # CLOSED / after a slow-client close: the connection is going away; drop.

        sender = asyncio.create_task(pump())
        try:
            await self._serve_connection(
                self.runtime, _incoming(ws), send, default_agent=default_agent,
                principal=self._principals.pop(ws, ""),
            )
        except Exception:
            log.exception("ws_connection_failed", conn=conn_id)
            await ws.close(1011, "internal error")
        finally:
            self.peak_queue_chars = max(self.peak_queue_chars, queue.peak_chars)
            await queue.close()
            sender.cancel()
            await asyncio.gather(sender, *closing, return_exceptions=True)
            self._active.discard(ws)
            log.info("ws_closed", conn=conn_id, code=ws.close_code)

    async def _close_slow(self, ws: ServerConnection) -> None:
        """Close a non-reading client with the slow-client code, abort if it won't take it."""
        try:
            await asyncio.wait_for(ws.close(SLOW_CLIENT_CLOSE_CODE, SLOW_CLIENT_REASON),
                                   self._close_timeout)
        except (TimeoutError, ConnectionClosed):
            pass
        finally:
            ws.transport.abort()


async def _incoming(ws: ServerConnection) -> AsyncIterator[str]:
    """Frames as text until the connection closes (binary frames are decoded as UTF-8)."""
    try:
        async for frame in ws:
            yield frame if isinstance(frame, str) else frame.decode("utf-8", errors="replace")
    except ConnectionClosed:
        return


def _remote(ws: ServerConnection) -> str:
    try:
        host, port = ws.remote_address[:2]
    except (TypeError, ValueError):
        return "?"
    return f"{host}:{port}"


# --------------------------------------------------------------------- `acpgate edge`


async def run_edge(cfg: Config, *, version: str,
                   ready: Callable[[EdgeServer], None] | None = None) -> int:
    """Serve the gateway until SIGINT/SIGTERM; returns the exit code.

    ``version`` is acpgate's, as the ACP handshakes report it.
    Connects to both services (``[services]`` or the default unix sockets),
    waits for their gRPC health, then opens the port. On a signal: stop
    accepting, close every connection (releasing its sessions), close the runtime.
    """
    from services.edge.connection import open_runtime

    cfg = with_service_addresses(cfg)
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop)
    probe = ServiceProbe(cfg, cfg.services.session_addr, cfg.services.lifecycle_addr)
    try:
        if not await _wait_for_services(probe, stop):
            return 1 if not stop.is_set() else 0
        store = TokenStore(token_db_path(cfg))
        if cfg.gateway.require_auth:
            tokens = await asyncio.to_thread(store.list)
            if not any(not t.revoked for t in tokens):
                log.warning("edge_no_tokens", hint="every connection will get 401 until "
                            "`acpgate token create` mints one")
        runtime = await open_runtime(cfg, version=version)
        try:
            server = EdgeServer(cfg, runtime, probe=probe, token_store=store)
            try:
                await server.start()
            except OSError as exc:
                log.error("edge_bind_failed", host=cfg.gateway.host, port=cfg.gateway.port,
                          error=str(exc))
                return 1
            if ready is not None:
                ready(server)
            await stop.wait()
            log.info("edge_shutting_down")
            await server.stop()
        finally:
            await runtime.close()
    finally:
        await probe.close()
        remove_signals()
    return 0


async def _wait_for_services(probe: ServiceProbe, stop: asyncio.Event,
                             within: float = 60.0) -> bool:
    """Wait until both services report SERVING (or a signal, or ``within`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    states: dict[str, str] = {}
    while not stop.is_set() and loop.time() < deadline:
        states = await probe.health()
        if all(s == "SERVING" for s in states.values()):
            return True
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except TimeoutError:
            pass
    if not stop.is_set():
        log.error("edge_services_unavailable", services=states)
    return False
