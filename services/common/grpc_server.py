"""Starting a gRPC server the acpgate way: health checking, reflection, clean stop.

Both services serve ``grpc.health.v1.Health`` (SERVING once started) and server
reflection, on a unix socket (``unix:/path``) or TCP (``host:port``).

A unix socket another live process serves is never taken over: gRPC itself
unlinks whatever socket file lies at the path when it binds (and when it stops),
so before binding :func:`claimed_address` probes the path — a connect that
succeeds means a live server there, refused with ``AddressInUse`` naming it; a
refused connect means a dead one's leftover file, removed. The probe, the removal
and the bind run under an exclusive lock on the socket's directory, so two
starters never both find the path stale. A stop removes the socket file only
while it is still the one this server bound.

The skeleton every service shares: :func:`start_service` serves one service with
the configured token check and TLS and releases the service's resources when the
server stops (or fails to start); :func:`run_until_signalled` is the
``acpgate <name>-service`` main: start, serve until SIGINT/SIGTERM, stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
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
from services.common.in_use import socket_in_use, socket_is_served
from services.common.inproc import InProcessChannel
from services.common.logs import StructLogger
from services.common.signals import install_reload_signal, install_stop_signals

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SERVER_OPTIONS",
    "RunningServer",
    "abort",
    "claimed_address",
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
    #: (device, inode) of the unix socket file this server bound (None: TCP).
    socket_file: tuple[int, int] | None = None

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
        if self.socket_file is None:
            await self.server.stop(grace)
        else:
            # gRPC unlinks the socket path as it stops: under the directory's lock, so that
            # no starter takes the path between this server's last accept and that unlink.
            path = self.address[len(UNIX):]
            dir_fd = await asyncio.to_thread(_lock_dir, Path(path).parent, create=False)
            try:
                await self.server.stop(grace)
                await asyncio.to_thread(_remove_own_socket, path, self.socket_file)
            finally:
                if dir_fd is not None:
                    os.close(dir_fd)
        if self.on_stop is not None:
            result = self.on_stop()
            if hasattr(result, "__await__"):
                await result


UNIX = "unix:"


def _file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of the socket file at ``path`` (None: none there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def _remove_own_socket(path: str, file_id: tuple[int, int]) -> None:
    """Unlink ``path`` while it is still the socket file ``file_id`` (blocking)."""
    if _file_id(path) == file_id:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _lock_dir(directory: Path, *, create: bool = True) -> int | None:
    """Hold an exclusive lock on ``directory`` (created first with ``create``); its
    descriptor, None when it is gone (blocking)."""
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear_stale(path: str) -> None:
    """Remove a dead server's socket file at ``path``; AddressInUse when a live process
    serves it. Anything else there (a directory) is left for the bind to fail on."""
    if _file_id(path) is None:
        return
    if socket_is_served(path):
        raise socket_in_use(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.asynccontextmanager
async def claimed_address(address: str) -> AsyncIterator[None]:
    """For a unix socket address: its directory made and locked, a stale socket file
    removed, a live one refused (AddressInUse) — bind inside the block. TCP: nothing."""
    if not address.startswith(UNIX):
        yield
        return
    path = address[len(UNIX):]
    dir_fd = await asyncio.to_thread(_lock_dir, Path(path).parent)
    try:
        await asyncio.to_thread(_clear_stale, path)
        yield
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


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
    socket_file = None
    async with claimed_address(address):
        if credentials is not None:
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
        if address.startswith(UNIX):
            socket_file = _file_id(address[len(UNIX):])
    if not address.startswith(UNIX) and address.endswith(":0"):
        address = f"{address.rsplit(':', 1)[0]}:{port}"
    await server.start()
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server=server, address=address, health=health_servicer,
                         socket_file=socket_file)


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
    starting: Awaitable[RunningServer], *, address: str, log: StructLogger, stopped_event: str,
    on_reload: Callable[[], object] | None = None,
) -> int:
    """Await ``starting`` (a service's start on ``address``), serve until SIGINT or
    SIGTERM, stop, log ``stopped_event``; 0 on a clean stop. SIGHUP, from before the start
    on, calls ``on_reload`` (the service re-reads its config) and never stops it."""
    remove_reload = install_reload_signal(on_reload or (lambda: None))
    try:
        running = await starting
        try:
            return await serve_until_signalled(running)
        finally:
            log.info(stopped_event, address=address)
    finally:
        remove_reload()
