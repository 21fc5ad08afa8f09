"""Serving the session service: in-process starter and the ``acpgate session-service`` entry.

``start_session_server(cfg, address)`` opens the store (falling back to memory
with a reason, never crashing) and serves ``SessionService`` with health
checking and reflection; ``run_session_service(cfg)`` does that on the
configured address until SIGINT/SIGTERM, then stops cleanly (exit 0).
"""

from __future__ import annotations

import grpc

from acpgate.session.v1 import session_pb2, session_pb2_grpc
from services.common.addresses import default_session_address
from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity, grpc_security
from services.common.grpc_server import RunningServer, run_until_signalled, start_service
from services.common.logs import get_logger
from services.session.servicer import SessionServicer
from services.session.store import Clock, open_store, wall_clock_ms

__all__ = ["SERVICE_NAME", "default_session_address", "run_session_service",
           "start_session_server"]

log = get_logger("session.server")

#: Full name of the service, for health checks and reflection.
SERVICE_NAME = session_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name


async def start_session_server(
    cfg: Config,
    address: str,
    *,
    clock: Clock = wall_clock_ms,
    security: GrpcSecurity | None = None,
) -> RunningServer:
    """Open the store at ``cfg.session_db_path`` and serve on ``address`` (``unix:/p`` or
    ``host:port``). ``await running.stop()`` stops serving and closes the store.

    ``security`` (default: from ``[services] token_env`` and the TLS environment,
    see ``services.common.grpc_auth``) adds the shared-token check and TLS.
    """
    sec = grpc_security(cfg) if security is None else security
    store = await open_store(cfg.session_db_path, clock=clock)
    servicer = SessionServicer(cfg, store)

    def register(server: grpc.aio.Server) -> None:
        session_pb2_grpc.add_SessionServiceServicer_to_server(servicer, server)

    running = await start_service(address, SERVICE_NAME, register, security=sec, close=store.close)
    log.info(
        "session_service_started",
        address=running.address,
        persistent=store.status.persistent,
        fallback_reason=store.status.fallback_reason,
    )
    return running


async def run_session_service(cfg: Config) -> int:
    """Serve until SIGINT or SIGTERM; 0 on a clean stop."""
    address = default_session_address(cfg)
    return await run_until_signalled(
        start_session_server(cfg, address),
        address=address,
        log=log,
        stopped_event="session_service_stopped",
    )
