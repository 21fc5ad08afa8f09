"""``acpgate edge``: the WebSocket gateway as one process (SPEC §0, §11).

Binds the gateway port first (or takes the listening sockets ``acpgate serve``
bound, ``--listen-fd``): a port in use ends the process at once with ``port 42617 on
127.0.0.1 is in use (by pid N)``, never a retry loop. Then dials both services
(``[services]`` or the default unix sockets of ``services.common.addresses``; the
gateway never embeds them), waits for their gRPC health, opens the runtime and the
:class:`~services.edge.transport.ws_server.EdgeServer` on those sockets, and runs until
SIGINT/SIGTERM — or, on serve's step-down signal (a hot restart), leaves its sessions
to its successor (:mod:`services.edge.transport.step_down`). One of several edge workers (``--worker``, ``--board-fd``) says on the
board when it serves, and accepts only its share of the connections
(:mod:`services.edge.transport.balance`).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Sequence

from services.common.addresses import with_service_addresses
from services.common.config import Config
from services.common.gc_tuning import tune_gc
from services.common.grpc_auth import load_security
from services.common.in_use import AddressInUse
from services.common.listeners import adopt_listeners, bind_listeners
from services.common.live_config import LiveConfig
from services.common.logs import get_logger
from services.common.signals import (
    STEP_DOWN_SIGNAL,
    install_reload_signal,
    install_signal,
    install_stop_signals,
)
from services.common.worker_board import WorkerBoard
from services.edge.tokens import TokenStore, token_db_path
from services.edge.transport.balance import Balancer
from services.edge.transport.connection import open_runtime
from services.edge.transport.probe import ServiceProbe, wait_for_services
from services.edge.transport.step_down import step_down
from services.edge.transport.ws_server import EdgeServer

log = get_logger("edge.ws")


async def _listeners(cfg: Config, listen_fds: Sequence[int]) -> list[socket.socket]:
    """The sockets inherited as ``listen_fds``, else the gateway port bound now
    (AddressInUse when taken: logged, then raised for the command line to report)."""
    if listen_fds:
        return await asyncio.to_thread(adopt_listeners, listen_fds)
    try:
        return await asyncio.to_thread(bind_listeners, cfg.gateway.host, cfg.gateway.port)
    except AddressInUse as exc:
        log.error("edge_port_in_use", host=cfg.gateway.host, port=cfg.gateway.port,
                  error=str(exc))
        raise


async def run_edge(cfg: Config, *, version: str,
                   ready: Callable[[EdgeServer], None] | None = None,
                   listen_fds: Sequence[int] = (), worker: int = 0,
                   live: LiveConfig | None = None, board_fd: int | None = None) -> int:
    """Serve the gateway until SIGINT/SIGTERM; returns the exit code.

    ``version`` is acpgate's, as the ACP handshakes report it. ``listen_fds``: the
    listening sockets ``acpgate serve`` bound for this child; none = bind the port
    here, first (a port in use raises AddressInUse before anything else happens).
    Then connects to both services (``[services]`` or the default unix sockets),
    waits for their gRPC health, and serves on the sockets. On a signal: stop
    accepting, close every connection (releasing its sessions), close the runtime.
    ``worker``: this edge's number among several ``acpgate serve`` runs on the one port
    (0: the only one): its limits, counters and claims are then shared
    (services.edge.sessions.worker_link). SIGHUP reloads ``live``: the runtime and the server
    take its limits (:meth:`EdgeRuntime.use_config`, :meth:`EdgeServer.use_config`).
    ``board_fd``: the workers' board serve made (with ``worker``): this worker says there
    that it serves once it does, and takes only its share of the connections.
    """
    cfg = with_service_addresses(cfg)
    board = _board(board_fd, worker)
    listeners = await _listeners(cfg, listen_fds)
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop)
    # SIGHUP from the start (its default would end the process); applied once serving.
    remove_reload = install_reload_signal(live.reload_soon if live else lambda: None)
    stepping = asyncio.Event()  # serve's hot restart: go, the sessions live on
    remove_step = install_signal(STEP_DOWN_SIGNAL, stepping.set)
    probe: ServiceProbe | None = None
    serving = False
    try:
        security = await load_security(cfg)
        probe = ServiceProbe(security, cfg.services.session_addr, cfg.services.lifecycle_addr)
        if not await wait_for_services(probe, stop):
            return 1 if not stop.is_set() else 0
        store = TokenStore(token_db_path(cfg))
        if cfg.gateway.require_auth:
            tokens = await asyncio.to_thread(store.list)
            if not any(not t.revoked for t in tokens):
                log.warning("edge_no_tokens", hint="every connection will get 401 until "
                            "`acpgate token create` mints one")
        runtime = await open_runtime(cfg, version=version, security=security, worker=worker)
        tune_gc()  # startup's objects out of the collector's sight, fewer collections
        try:
            balancer = Balancer(board, worker) if board is not None else None
            server = EdgeServer(cfg, runtime, probe=probe, token_store=store, balancer=balancer)
            serving = True  # from here the server owns the sockets (it closes them)
            await server.start(listeners)
            if balancer is not None:  # accepting, services answering: /healthz may count it
                balancer.serving(os.getpid())
            if live is not None:
                live.subscribe(runtime.use_config)
                live.subscribe(lambda _: server.use_config(runtime.cfg))
            if ready is not None:
                ready(server)
            await _first(stop, stepping)
            log.info("edge_shutting_down", step_down=stepping.is_set())
            if balancer is not None:
                await balancer.close()
            if stepping.is_set():
                await step_down(server, runtime)  # exits, sessions left running
            await server.stop()
        finally:
            await runtime.close()
    finally:
        if not serving:
            for sock in listeners:
                sock.close()
        if probe is not None:
            await probe.close()
        remove_signals()
        remove_reload()
        remove_step()
        if board is not None:
            board.release()
    return 0


async def _first(*events: asyncio.Event) -> None:
    """Until one of ``events`` is set."""
    waits = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()


def _board(fd: int | None, worker: int) -> WorkerBoard | None:
    """The board inherited as ``fd`` when this is a worker with a slot on it; a board that
    is none, or has no slot for ``worker``, is logged and left (nothing is shared)."""
    if fd is None or not worker:
        return None
    try:
        board = WorkerBoard.adopt(fd)
    except (OSError, ValueError) as exc:
        log.error("edge_board_unusable", why=str(exc))
        return None
    if worker > board.workers:
        log.error("edge_board_unusable", why=f"no slot for worker {worker}")
        board.release()
        return None
    return board
