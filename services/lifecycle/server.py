"""Serving the lifecycle service: in-process starter and ``acpgate lifecycle-service``.

``start_lifecycle_server(cfg, address)`` loads the instance id, opens the lease
store, installs the wrapper, expires old leases and reaps this gateway's
open/closing leases of earlier runs *before* it serves. Stopping the returned
server closes (verifies and reaps) every lease it still holds.
"""

from __future__ import annotations

import asyncio

import grpc

from acpgate.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.addresses import default_lifecycle_address
from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity, load_security
from services.common.grpc_server import RunningServer, run_until_signalled, start_service
from services.common.logs import get_logger
from services.common.private_files import private_dir
from services.lifecycle.controller import LifecycleController
from services.lifecycle.instance import load_or_create_instance_id
from services.lifecycle.leases import LeaseStore
from services.lifecycle.proctable import ProcessTable, PsutilProcessTable
from services.lifecycle.servicer import LifecycleServicer
from services.lifecycle.spawn import install_wrapper

__all__ = [
    "SERVICE_NAME",
    "default_lifecycle_address",
    "open_controller",
    "run_lifecycle_service",
    "start_lifecycle_server",
]

log = get_logger("lifecycle.server")

#: Full name of the service, for health checks and reflection.
SERVICE_NAME = lifecycle_pb2.DESCRIPTOR.services_by_name["LifecycleService"].full_name
LEASES_DB_NAME = "leases.db"


async def open_controller(cfg: Config, *, proctable: ProcessTable | None = None) -> LifecycleController:
    """Instance id, lease store and wrapper of ``cfg``'s lifecycle state dir, ready to use."""
    state_dir = cfg.lifecycle_state_dir
    await asyncio.to_thread(private_dir, cfg.data_dir)  # acpgate's state: the owner's alone
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    store = await LeaseStore.open(state_dir / LEASES_DB_NAME)
    return LifecycleController(
        store=store,
        table=proctable if proctable is not None else PsutilProcessTable(),
        instance_id=instance_id,
        state_dir=state_dir,
        wrapper=wrapper,
        term_grace_ms=cfg.lifecycle.term_grace_ms,
        retention_secs=cfg.lifecycle.lease_retention_secs,
    )


async def start_lifecycle_server(
    cfg: Config, address: str, *, proctable: ProcessTable | None = None,
    security: GrpcSecurity | None = None,
) -> RunningServer:
    """Reap startup orphans, then serve ``LifecycleService`` on ``address``.

    ``security`` (default: the install's service credential and the TLS environment) is
    the credential every call must carry; its seal key opens the launch specs the session
    service sealed. ``await running.stop()`` stops serving, closes every lease this run
    holds and closes the store.
    """
    sec = await load_security(cfg) if security is None else security
    controller = await open_controller(cfg, proctable=proctable)

    async def close() -> None:
        """Close every lease this run holds, then the store."""
        try:
            await controller.close_all(reason="stop")
        finally:
            await controller.store.close()

    try:
        await _reap_before_serving(controller)
        servicer = LifecycleServicer(controller, seal_key=sec.seal_key)
    except BaseException:
        await close()
        raise

    def register(server: grpc.aio.Server) -> None:
        """Add the lifecycle servicer to ``server``."""
        lifecycle_pb2_grpc.add_LifecycleServiceServicer_to_server(servicer, server)

    running = await start_service(address, SERVICE_NAME, register, security=sec, close=close)
    log.info(
        "lifecycle_service_started",
        address=running.address,
        instance_id=controller.instance_id,
        wrapper_root=str(controller.wrapper.root),
    )
    return running


async def _reap_before_serving(controller: LifecycleController) -> None:
    """Expire old leases and reap this gateway's leases of earlier runs (SPEC §13).

    Startup reaping is cleanup: a failure is reported, it never stops the service;
    the leftovers stay open/closing for a later reap.
    """
    await controller.expire()
    try:
        results = await controller.reap_orphans(reason="startup")
    except Exception as exc:  # leftovers stay open/closing for a later reap
        log.error("startup_reap_failed", instance_id=controller.instance_id,
                  why=f"{type(exc).__name__}: {exc}")
        results = []
    log.info(
        "startup_reap",
        instance_id=controller.instance_id,
        leases=len(results),
        terminated=sum(len(r.terminated_pids) for r in results),
        unverified=[r.unverified_reason for r in results if r.unverified_reason],
    )


async def run_lifecycle_service(cfg: Config) -> int:
    """Serve until SIGINT or SIGTERM; 0 on a clean stop."""
    address = default_lifecycle_address(cfg)
    return await run_until_signalled(
        start_lifecycle_server(cfg, address),
        address=address,
        log=log,
        stopped_event="lifecycle_service_stopped",
    )
