"""Serving the session service: in-process starter and the ``acpgate session-service`` entry.

``start_session_server(cfg, address)`` opens the store — the SQLite file in the
data dir, or the PostgreSQL database of ``[store] url`` — and serves
``SessionService`` with health checking and reflection. A store that exists and
cannot be used refuses the start
(:class:`~services.session.store.unusable.StoreUnusable`, naming the commands that deal
with it); one that cannot be created runs in memory, and
says so on stderr (whatever the log level: nothing will survive this process).
``run_session_service(cfg)`` does that on the configured address until
SIGINT/SIGTERM, then stops cleanly (exit 0); SIGHUP reloads the config it decides
with (agents, aliases, autonomy, visibility). Given its host's gateway instance id
(``acpgate serve`` passes ``--host-instance``), it holds that host's liveness in the
store before it serves (:mod:`services.session.store.postgres.liveness`): a restarted
session service vouches for its host again before anyone judges its claims.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import grpc

from acpgate_contracts.session.v1 import session_pb2, session_pb2_grpc
from services.common.addresses import default_session_address
from services.common.config import Config, resolve_config_dir
from services.common.gc_tuning import tune_gc
from services.common.grpc_auth import GrpcSecurity, load_security
from services.common.grpc_server import RunningServer, run_until_signalled, start_service
from services.common.live_config import LiveConfig
from services.common.logs import get_logger
from services.session.api.rpcs.unavailable import StoreUnavailableInterceptor
from services.session.api.servicer import SessionServicer
from services.session.store import (
    Clock,
    PostgresTarget,
    StoreStatusInfo,
    StoreTarget,
    open_store,
    wall_clock_ms,
)
from services.session.store.unusable import StoreUnusable, with_config_dir

__all__ = ["SERVICE_NAME", "default_session_address", "run_session_service",
           "start_session_server", "store_target"]

log = get_logger("session.server")

#: Full name of the service, for health checks and reflection.
SERVICE_NAME = session_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name


def store_target(cfg: Config, environ: Mapping[str, str] | None = None) -> StoreTarget:
    """``[store] url`` as the PostgreSQL database to open (its password from the variable
    ``[store] password_env`` names, when set), else the SQLite file in the data dir."""
    st = cfg.store
    if not st.url:
        return cfg.session_db_path
    env = os.environ if environ is None else environ
    password = ""
    if st.password_env:
        password = env.get(st.password_env, "")
        if not password:
            log.warning("store_password_env_unset", variable=st.password_env)
    return PostgresTarget(st.url, password=password, pool_size=st.pool_size,
                          connect_timeout_secs=float(st.connect_timeout_secs))


def _config_dir_flag(config_dir: Path) -> str:
    """``config_dir`` as a command's ``--config-dir`` needs it; "" for the default one."""
    return "" if config_dir == resolve_config_dir(None, {}) else str(config_dir)


def warn_in_memory(status: StoreStatusInfo, config_dir: Path) -> None:
    """One line on stderr: the sessions of this process are kept in memory only, and why."""
    doctor = with_config_dir("acpgate doctor", _config_dir_flag(config_dir))
    print(f"acpgate: warning: sessions are kept in memory only ({status.fallback_reason}): "
          "none of them survives this process, and session/load, list and resume are off. "
          f"`{doctor}` says more.", file=sys.stderr, flush=True)


async def start_session_server(
    cfg: Config,
    address: str,
    *,
    clock: Clock = wall_clock_ms,
    security: GrpcSecurity | None = None,
    live: LiveConfig | None = None,
    host_instance: str = "",
) -> RunningServer:
    """Open the store :func:`store_target` names and serve on ``address`` (``unix:/p`` or
    ``host:port``). ``await running.stop()`` stops serving and closes the store.

    ``security`` (default: the install's service credential and the TLS environment,
    see ``services.common.grpc_auth``) is the credential every call must carry (it also
    seals the launch specs), and TLS. ``live``: the process's config, whose reloads the
    servicer takes (new sessions resolve against the reloaded agents). ``host_instance``:
    the gateway instance id of the host this service serves, whose liveness it holds.
    """
    sec = await load_security(cfg) if security is None else security
    try:
        store = await open_store(store_target(cfg), clock=clock)
    except StoreUnusable as exc:
        raise exc.for_install(_config_dir_flag(cfg.config_dir)) from None
    if not store.status.persistent:
        warn_in_memory(store.status, cfg.config_dir)
    try:
        await store.hold_liveness(host_instance)
    except BaseException:
        await store.close()
        raise
    servicer = SessionServicer(cfg, store, seal_key=sec.seal_key)
    if live is not None:  # aliases, agents, policy: each call reads the reloaded config
        live.subscribe(servicer.use_config)

    def register(server: grpc.aio.Server) -> None:
        session_pb2_grpc.add_SessionServiceServicer_to_server(servicer, server)

    running = await start_service(address, SERVICE_NAME, register, security=sec,
                                  close=store.close,
                                  interceptors=[StoreUnavailableInterceptor()])
    log.info(
        "session_service_started",
        address=running.address,
        backend=store.status.backend,
        persistent=store.status.persistent,
        fallback_reason=store.status.fallback_reason,
    )
    return running


async def run_session_service(cfg: Config, live: LiveConfig | None = None,
                              host_instance: str = "") -> int:
    """Serve until SIGINT or SIGTERM (SIGHUP reloads ``live``); 0 on a clean stop."""
    address = default_session_address(cfg)

    async def starting() -> RunningServer:
        running = await start_session_server(cfg, address, live=live,
                                             host_instance=host_instance)
        tune_gc()  # this process is the service alone (never an embedding's)
        return running

    return await run_until_signalled(
        starting(),
        address=address,
        log=log,
        stopped_event="session_service_stopped",
        on_reload=live.reload_soon if live is not None else None,
    )
