"""``acpgate edge``: the WebSocket gateway as one process (SPEC §0, §11).

Dials both services (``[services]`` or the default unix sockets of
``services.common.addresses``; the gateway never embeds them), waits for their
gRPC health, opens the runtime and the :class:`~services.edge.ws_server.EdgeServer`,
and runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.common.addresses import with_service_addresses
from services.common.config import Config
from services.common.grpc_auth import load_security
from services.common.logs import get_logger
from services.common.signals import install_stop_signals
from services.edge.connection import open_runtime
from services.edge.probe import ServiceProbe, wait_for_services
from services.edge.tokens import TokenStore, token_db_path
from services.edge.ws_server import EdgeServer

log = get_logger("edge.ws")


async def run_edge(cfg: Config, *, version: str,
                   ready: Callable[[EdgeServer], None] | None = None) -> int:
    """Serve the gateway until SIGINT/SIGTERM; returns the exit code.

    ``version`` is acpgate's, as the ACP handshakes report it.
    Connects to both services (``[services]`` or the default unix sockets),
    waits for their gRPC health, then opens the port. On a signal: stop
    accepting, close every connection (releasing its sessions), close the runtime.
    """
    cfg = with_service_addresses(cfg)
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop)
    security = await load_security(cfg)
    probe = ServiceProbe(security, cfg.services.session_addr, cfg.services.lifecycle_addr)
    try:
        if not await wait_for_services(probe, stop):
            return 1 if not stop.is_set() else 0
        store = TokenStore(token_db_path(cfg))
        if cfg.gateway.require_auth:
            tokens = await asyncio.to_thread(store.list)
            if not any(not t.revoked for t in tokens):
                log.warning("edge_no_tokens", hint="every connection will get 401 until "
                            "`acpgate token create` mints one")
        runtime = await open_runtime(cfg, version=version, security=security)
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

