"""Starting a gRPC server the acpgate way: health checking, reflection, clean stop.

Both services serve ``grpc.health.v1.Health`` (SERVING once started) and server
reflection, on a unix socket (``unix:/path``) or TCP (``host:port``).

The skeleton every service shares: :func:`start_service` serves one service with
the configured token check and TLS and releases the service's resources when the
server stops (or fails to start); :func:`run_until_signalled` is the
``acpgate <name>-service`` main: start, serve until SIGINT/SIGTERM, stop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common.grpc_auth import (
    GrpcSecurity,
    open_service_channel,
    server_credentials,
    server_interceptors,
)
from services.common.grpc_limits import MAX_MESSAGE_BYTES, SERVER_OPTIONS
from services.common.inproc import InProcessChannel
from services.common.logs import StructLogger
from services.common.signals import install_stop_signals

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SERVER_OPTIONS",
    "RunningServer",
    "abort",
    "prepare_address",
    "run_until_signalled",
    "serve_until_signalled",
    "start_server",
    "start_service",
]


async def abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, details: str) -> NoReturn:
    """End the RPC with ``code`` and ``details`` (typed NoReturn, so callers need no dead return)."""
    await context.abort(code, details)
    raise AssertionError("unreachable")  # pragma: no cover - context.abort always raises


@dataclass
class RunningServer:
    """A started gRPC server and the address it listens on."""

    server: grpc.aio.Server
    address: str
    health: health.aio.HealthServicer  # type: ignore[name-defined]
    on_stop: Callable[[], Any] | None = None
    #: The servicers' registration (for an in-process channel to the same servicers).
    register: Callable[[grpc.aio.Server], None] | None = None
    #: The service's own interceptors (not the transport's token check).
    interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
    #: The credential (and TLS) every call must carry (``start_service``).
    security: GrpcSecurity | None = None

    def dial(self) -> grpc.aio.Channel:
        """A channel to this server over its address, every call carrying its credential
        (operator tools, tests; the edge of the same process uses :meth:`local_channel`)."""
        if self.security is None:
            raise RuntimeError("this server was started without a service credential")
        return open_service_channel(self.security, self.address)

    def local_channel(self) -> InProcessChannel:
        """A channel into these very servicers from this process (services.common.inproc)."""
        if self.register is None:
            raise RuntimeError("this server was started without a registration")
        channel = InProcessChannel(self.interceptors)
        self.register(channel)  # type: ignore[arg-type]  # it registers like a server
        return channel

    async def stop(self, grace: float = 1.0) -> None:
        """Mark NOT_SERVING, stop accepting, let calls finish for ``grace`` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        if self.on_stop is not None:
            result = self.on_stop()
            if hasattr(result, "__await__"):
                await result
        if self.address.startswith("unix:"):
            try:
                os.unlink(self.address[len("unix:"):])
            except FileNotFoundError:
                pass


def prepare_address(address: str) -> str:
    """Create the parent dir of a unix socket and remove a stale socket file."""
    if address.startswith("unix:"):
        path = Path(address[len("unix:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_socket():
            path.unlink()
    return address


async def start_server(
    address: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> RunningServer:
    """Start a server with ``register``'s servicers plus health and reflection.

    ``service_names`` are the full names of the registered services (for
    reflection and per-service health). Returns once the port is bound and
    every service reports SERVING. For ``host:0`` the chosen port is filled in.
    """
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=list(interceptors))
    register(server)
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME]
    reflection.enable_server_reflection(names, server)
    prepare_address(address)
    if credentials is not None:
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if not address.startswith("unix:") and address.endswith(":0"):
        address = f"{address.rsplit(':', 1)[0]}:{port}"
    await server.start()
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server=server, address=address, health=health_servicer)


async def serve_until_signalled(running: RunningServer) -> int:
    """Serve ``running`` until SIGINT or SIGTERM, then stop it gracefully; returns 0."""
    stop = asyncio.Event()
    remove = install_stop_signals(stop)
    try:
        await stop.wait()
    finally:
        remove()
        await running.stop()
    return 0


async def start_service(
    address: str,
    service_name: str,
    register: Callable[[grpc.aio.Server], None],
    *,
    security: GrpcSecurity,
    close: Callable[[], Awaitable[None]],
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RunningServer:
    """Serve one acpgate service on ``address`` with ``security``'s token check and TLS
    (then the service's own ``interceptors``).

    ``close`` releases what the service holds (its store, its leases): it runs
    after ``await running.stop()`` has stopped the server, and also when the
    server cannot start (e.g. an unreadable TLS key), so nothing is left open.
    """
    try:
        running = await start_server(
            address,
            register,
            [service_name],
            interceptors=[*server_interceptors(security), *interceptors],
            credentials=server_credentials(security, address),
        )
    except BaseException:
        await close()
        raise
    running.on_stop = close
    running.register = register
    running.interceptors = tuple(interceptors)
    running.security = security
    return running


async def run_until_signalled(
    starting: Awaitable[RunningServer], *, address: str, log: StructLogger, stopped_event: str
) -> int:
    """Await ``starting`` (a service's start on ``address``), serve until SIGINT or
    SIGTERM, stop, log ``stopped_event``; 0 on a clean stop."""
    running = await starting
    try:
        return await serve_until_signalled(running)
    finally:
        log.info(stopped_event, address=address)
