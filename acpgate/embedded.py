"""Embedded mode: the session and lifecycle services inside the edge's own process (SPEC §0).

``acpgate acp`` with an empty ``[services]`` address runs that service here,
serving real gRPC on a unix socket in a private, short temp dir (unix socket
paths are limited to ~100 bytes, so not under the data dir) for other clients,
while the edge of this process reaches it through an in-process channel
(``services.common.inproc``): the same generated stub and servicer, the
same contract, without serializing every message and carrying it over the
socket to itself (bench/PROFILE.md). Only the lifecycle service still
touches processes (ARCHITECTURE rule 1): the edge reaches an adapter through
the very ``Attach`` servicer, with the same batches. :data:`IN_PROCESS` turns
the in-process channel off (the edge then dials the sockets).

This is composition, so it lives in the ``acpgate`` package: the edge never
imports a service, it is handed :func:`start_embedded` (see
``services.edge.sessions.runtime.StartServices``) and gets back the addresses to dial,
the in-process channels, and a way to stop what was started.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from acpgate.ops.endpoints import announce, unregister
from acpgate.socket_dirs import make_socket_dir, sweep_stale_async
from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity, grpc_security, load_security
from services.common.grpc_server import RunningServer
from services.common.live_config import LiveConfig
from services.common.logs import get_logger
from services.common.service_key import ServiceKeyError, ephemeral_key
from services.lifecycle.api.server import start_lifecycle_server
from services.session.api.server import start_session_server

log = get_logger("embedded")

#: The edge of this process reaches the services started here in-process (not over their sockets).
IN_PROCESS = True


@dataclass
class EmbeddedServices:
    """The services one process started for itself, and the addresses of both.

    An address that ``[services]`` configured is passed through as given; only
    the empty ones were started here.
    """

    session_addr: str
    lifecycle_addr: str
    #: The credential every call to these addresses carries (the services check it).
    security: GrpcSecurity
    servers: list[RunningServer] = field(default_factory=list)
    tempdir: str | None = None
    #: This process's entry in ``<data dir>/run/endpoints`` (acpgate ps finds it there).
    endpoint: Path | None = None

    def local_channel(self, address: str) -> grpc.aio.Channel | None:
        """An in-process channel to the service started here at ``address`` (None: dial it)."""
        if not IN_PROCESS:
            return None
        for server in self.servers:
            if server.address == address:
                return server.local_channel()  # type: ignore[return-value]  # the same surface
        return None

    async def stop(self) -> None:
        """Stop what was started (last first: lifecycle reaps its leases) and remove the sockets."""
        servers, self.servers = self.servers, []
        if self.endpoint is not None:
            await asyncio.to_thread(unregister, self.endpoint)
            self.endpoint = None
        for server in reversed(servers):
            with contextlib.suppress(Exception):
                await server.stop()
        if self.tempdir is not None:
            shutil.rmtree(self.tempdir, ignore_errors=True)
            self.tempdir = None


async def embedded_security(cfg: Config) -> GrpcSecurity:
    """The install's service credential; when its key file cannot be read or made (a
    read-only data dir), one for this process alone — its own services then answer
    nobody else, which is all an embedded edge needs."""
    try:
        return await load_security(cfg)
    except ServiceKeyError as exc:
        log.warning("service_key_ephemeral", why=str(exc))
        return grpc_security(cfg, credential=ephemeral_key())


async def start_embedded(cfg: Config, live: LiveConfig | None = None) -> EmbeddedServices:
    """Start every service whose ``[services]`` address is empty; stop them all on failure.

    Both are started with one service credential (:func:`embedded_security`): every call
    on their sockets must carry it, and the seal key derived from it makes the lifecycle
    service run only what the session service resolved. The session service started here
    takes ``live``'s reloads (new sessions resolve against the reloaded agents)."""
    security = await embedded_security(cfg)
    services = EmbeddedServices(cfg.services.session_addr, cfg.services.lifecycle_addr,
                                security)
    if services.session_addr and services.lifecycle_addr:
        return services
    # A SIGKILLed acpgate could not remove its dir: sweep those first (acpgate/socket_dirs.py).
    await sweep_stale_async()
    services.tempdir = make_socket_dir()
    try:
        if not services.session_addr:
            server = await start_session_server(cfg, f"unix:{services.tempdir}/s.sock",
                                                security=security, live=live)
            services.servers.append(server)
            services.session_addr = server.address
        if not services.lifecycle_addr:
            # Its client dies with it: no adoption window, the wrappers clean up at once.
            server = await start_lifecycle_server(cfg, f"unix:{services.tempdir}/l.sock",
                                                  security=security, adopt_secs=0)
            services.servers.append(server)
            services.lifecycle_addr = server.address
    except BaseException:
        await services.stop()
        raise
    services.endpoint = await announce(cfg.data_dir, "acp", services.session_addr,
                                       services.lifecycle_addr)
    return services
