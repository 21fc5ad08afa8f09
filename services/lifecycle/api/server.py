"""Serving the lifecycle service: in-process starter and ``acpgate lifecycle-service``.

``start_lifecycle_server(cfg, address)`` takes an instance slot under the data dir
(:mod:`services.lifecycle.leases.instance_slots`: any number of lifecycle services may share one),
loads the install's instance id and derives the slot's, opens the lease store,
installs the wrapper, re-adopts the live wrappers an earlier run of its slot left
(:mod:`services.lifecycle.startup.adopt`), expires old leases and reaps the live leases of earlier runs
of its slot and of dead slots (:mod:`services.lifecycle.startup.reap`), and on slot 0
the pre-lease records waiting (:mod:`services.lifecycle.startup.legacy_records`), *before* it
serves — never a live slot's. Stopping the returned server closes (verifies and
reaps) every lease it still holds, then gives the slot up.

On a unix address, with ``[services] data_path = "auto"``, it also serves the fd
socket beside it (:mod:`services.lifecycle.attach.fd_server`): an edge on this host takes
the adapters' pipes there instead of having every line relayed.

``acpgate serve``'s step-down signal (a hot restart) ends ``acpgate lifecycle-service`` at
once, exit 0, closing no lease: each wrapper waits its adoption window, and the
successor on the same slot adopts it.
"""

from __future__ import annotations

import asyncio

import grpc

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.addresses import default_lifecycle_address
from services.common.config import Config
from services.common.fd_channel import DATA_PATH_AUTO, fd_socket_path
from services.common.grpc_auth import GrpcSecurity, load_security
from services.common.grpc_server import RunningServer, run_until_signalled, start_service
from services.common.live_config import LiveConfig
from services.common.logs import get_logger
from services.common.private_files import private_dir
from services.common.signals import STEP_DOWN_SIGNAL, exit_now, install_signal
from services.lifecycle.adapters.control_channel import AdoptPolicy, control_dir
from services.lifecycle.adapters.spawn import install_wrapper
from services.lifecycle.api.servicer import LifecycleServicer
from services.lifecycle.attach.fd_grants import FdGrants
from services.lifecycle.attach.fd_server import FdServer
from services.lifecycle.controller import LifecycleController
from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.instance_slots import (
    Slot,
    acquire_slot,
    adopt_slot,
    slot_instance_id,
)
from services.lifecycle.leases.store import LeaseStore
from services.lifecycle.processes.table import ProcessTable, PsutilProcessTable
from services.lifecycle.startup.adopt import adopt_at_start
from services.lifecycle.startup.reap import reap_at_start

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


async def open_controller(cfg: Config, *, proctable: ProcessTable | None = None,
                          slot: Slot | None = None, credential: str = "",
                          adopt_secs: int | None = None) -> LifecycleController:
    """Slot, instance id, lease store and wrapper of ``cfg``'s lifecycle state dir, ready
    to use. ``slot`` is one the caller holds (``acpgate serve`` hands its child the one it
    took); None takes the lowest free one. ``await controller.close()`` gives it up.
    ``credential`` and ``adopt_secs`` (default ``[lifecycle] adopt_secs``) give its wrappers
    an adoption window (:mod:`services.lifecycle.startup.adopt`; none without a credential)."""
    state_dir = cfg.lifecycle_state_dir
    await asyncio.to_thread(private_dir, cfg.data_dir)  # acpgate's state: the owner's alone
    run_dir = await asyncio.to_thread(control_dir, state_dir)
    window = cfg.lifecycle.adopt_secs if adopt_secs is None else adopt_secs
    if slot is None:
        slot = await asyncio.to_thread(acquire_slot, state_dir)
    try:
        install_id = await load_or_create_instance_id(state_dir)
        wrapper = await install_wrapper(state_dir)
        store = await LeaseStore.open(state_dir / LEASES_DB_NAME)
    except BaseException:
        slot.release()
        raise
    return LifecycleController(
        store=store,
        table=proctable if proctable is not None else PsutilProcessTable(),
        instance_id=slot_instance_id(install_id, slot.number),
        install_id=install_id,
        slot=slot,
        state_dir=state_dir,
        wrapper=wrapper,
        term_grace_ms=cfg.lifecycle.term_grace_ms,
        retention_secs=cfg.lifecycle.lease_retention_secs,
        adoption=AdoptPolicy(window, credential, run_dir),
    )


async def start_lifecycle_server(
    cfg: Config, address: str, *, proctable: ProcessTable | None = None,
    security: GrpcSecurity | None = None, slot: Slot | None = None,
    adopt_secs: int | None = None,
) -> RunningServer:
    """Reap startup orphans, then serve ``LifecycleService`` on ``address``.

    ``security`` (default: the install's service credential and the TLS environment) is
    the credential every call must carry; its seal key opens the launch specs the session
    service sealed. ``slot``: as for :func:`open_controller`. ``await running.stop()``
    stops serving, closes every lease this run holds, closes the store and gives the
    slot up.
    """
    sec = await load_security(cfg) if security is None else security
    controller = await open_controller(cfg, proctable=proctable, slot=slot, credential=sec.token,
                                       adopt_secs=adopt_secs)
    fds: FdServer | None = None

    async def close() -> None:
        """Stop handing out pipes; close every lease this run holds, the store, the slot."""
        try:
            if fds is not None:
                await fds.close()
            await controller.close_all(reason="stop")
        finally:
            await controller.close()

    try:
        await adopt_at_start(controller)  # before the reap: what is adopted is not an orphan
        await reap_at_start(controller)
        fds = await _fd_server(cfg, address, sec.token)
        servicer = LifecycleServicer(controller, seal_key=sec.seal_key,
                                     fd_grants=fds.grants if fds is not None else None)
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
        slot=controller.instance().slot,
        wrapper_root=str(controller.wrapper.root),
    )
    return running


async def _fd_server(cfg: Config, address: str, credential: str) -> FdServer | None:
    """The fd socket of the service at ``address``, serving; None where there is none (a
    TCP address, ``data_path = "grpc"``, a path too long, or one that cannot be bound:
    every stream then relays, as it always can)."""
    path = fd_socket_path(address) if cfg.services.data_path == DATA_PATH_AUTO else None
    if path is None:
        return None
    server = FdServer(path, FdGrants(credential))
    try:
        await server.start()
    except OSError as exc:
        log.warning("fd_socket_unavailable", why=f"{type(exc).__name__}: {exc.strerror or exc}")
        return None
    return server


async def run_lifecycle_service(cfg: Config, *, slot_fd: int | None = None,
                                live: LiveConfig | None = None) -> int:
    """Serve until SIGINT or SIGTERM; 0 on a clean stop. SIGHUP reloads ``live`` (its
    subscribers: the log output; ``[lifecycle]`` keys need a restart).

    ``slot_fd``: the locked slot file ``acpgate serve`` took for this child
    (``--slot-fd``), so that a restarted child keeps its slot; None takes the lowest
    free one."""
    address = default_lifecycle_address(cfg)
    slot = None
    if slot_fd is not None:
        slot = await asyncio.to_thread(adopt_slot, cfg.lifecycle_state_dir, slot_fd)
    remove_step = install_signal(STEP_DOWN_SIGNAL, _step_down)
    try:
        return await run_until_signalled(
            start_lifecycle_server(cfg, address, slot=slot),
            address=address,
            log=log,
            stopped_event="lifecycle_service_stopped",
            on_reload=live.reload_soon if live is not None else None,
        )
    finally:
        remove_step()


def _step_down() -> None:
    """A hot restart: leave now, every lease open and every wrapper running (they wait
    ``[lifecycle] adopt_secs`` for the successor of this slot to adopt them)."""
    log.info("lifecycle_stepped_down")
    exit_now(0)
