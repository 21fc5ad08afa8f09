"""``acpgate serve``: the session service, the lifecycle service and the edge as
supervised child processes on one host (SPEC §0, §11); ``[gateway] workers`` edge
processes, all serving the one port.

Before any child starts, serve takes what the three will run on, so that a
conflict ends it at once with one clear sentence (exit 2) instead of a child
failing, or looping, later: the install's service credential; ``<data
dir>/run/serve.lock`` (one serve per data dir: a second is refused naming the
first's PID, :mod:`acpgate.serve_lock`); the gateway port, bound here (``port
42617 on 127.0.0.1 is in use (by pid N)``, :mod:`services.common.listeners`);
and a lifecycle instance slot (:mod:`services.lifecycle.leases.instance_slots`). Each child
inherits what is its own: every child the serve lock, the lifecycle service its
slot (``--slot-fd``: a restarted child keeps the slot, and with it the instance id
the edge claims sessions under), the edge the listening sockets (``--listen-fd``:
a restarted edge never loses the port). serve logs ``serve_ready`` only with the
port bound and every edge worker serving (:mod:`acpgate.serve_board`).

Start order: session service and lifecycle service (unix sockets under
``<data dir>/run`` unless ``[services]`` names addresses), wait for both to
report SERVING over gRPC health, then the edge serves the bound port.

A child that exits while serve is running is restarted with exponential
backoff (reset after it has stayed up for a while) and the event is logged
(:class:`~acpgate.serve_supervisor.Supervisor` does all of this; this module runs it).

SIGHUP (and ``acpgate config set``) reloads the config here and in every child
(:mod:`acpgate.serve_reload`).

``--replace`` (or SIGUSR2 to a running serve, which starts ``serve --replace`` itself):
a hot restart — the running serve hands this one its lock, slot and listening sockets
and steps down leaving sessions and agents running (:mod:`acpgate.serve_handover`,
:mod:`acpgate.serve_replace`).

SIGINT/SIGTERM: graceful shutdown in dependency order — edge first (stops
accepting, closes its connections and their sessions), then the lifecycle
service (reaps every lease it still holds), then the session service. Each
gets a grace period before SIGKILL, so no process is left behind. Children run
in their own process groups (a terminal's Ctrl-C reaches only serve, which then
applies the order) with a parent-death signal, so they stop if serve is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from acpgate.ops.endpoints import announce, unregister
from acpgate.serve_handover import HandoverServer
from acpgate.serve_reload import install_serve_reload
from acpgate.serve_replace import start_successor
from acpgate.serve_supervisor import Supervisor, SupervisorOptions
from services.common.addresses import gateway_url, service_addresses
from services.common.config import Config, ConfigError, load_config
from services.common.live_config import LiveConfig
from services.common.logs import get_logger
from services.common.signals import REPLACE_SIGNAL, install_signal, install_stop_signals

__all__ = ["Supervisor", "SupervisorOptions", "run_serve"]

log = get_logger("serve")


async def run_serve(
    cfg: Config,
    *,
    options: SupervisorOptions | None = None,
    on_ready: Callable[[Supervisor], None] | None = None,
    live: LiveConfig | None = None,
    replace: bool = False,
) -> int:
    """``acpgate serve``: run the children until SIGINT/SIGTERM; 0 on a clean stop.
    SIGHUP reloads ``live`` (default: ``cfg`` as loaded from its config dir) here and in
    every child. ``replace``: take over from the serve running on the data dir, if any
    (a hot restart); SIGUSR2 starts such a successor, and a successor's takeover ends
    this serve (0) with its sessions and agents left running for it.

    What refuses the start before any child runs (a port in use, another serve on the
    data dir, no service key, no slot) is logged and raised as the ConfigError that
    says why (the command line prints it and exits 2)."""
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop)
    supervisor = Supervisor(cfg, options=options)
    supervisor.replace = replace
    remove_replace = install_signal(REPLACE_SIGNAL, start_successor)
    handover: HandoverServer | None = None
    remove_reload = install_serve_reload(
        supervisor, live or LiveConfig(cfg, lambda: load_config(cfg.config_dir)))
    code = 0
    endpoint = None
    try:
        starting = asyncio.create_task(supervisor.start())
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done() and not starting.result():  # result() raises a refusal
                code = 1
            elif starting.done():
                log.info("serve_ready", config_dir=str(cfg.config_dir), port=supervisor.port,
                         slot=supervisor.slot.number if supervisor.slot is not None else None)
                endpoint = await announce(cfg.data_dir, "serve", *service_addresses(cfg),
                                          gateway=gateway_url(cfg, supervisor.port))
                handover = HandoverServer(supervisor, supervisor.security.token, stop.set)
                await handover.start()
                if on_ready is not None:
                    on_ready(supervisor)
                await stopper
            else:
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
        finally:
            stopper.cancel()
        log.info("serve_stopping")
    except ConfigError as exc:
        log.error("serve_refused", error=str(exc))
        raise
    finally:
        if handover is not None:
            await handover.close()
        if supervisor.takeover is not None:
            supervisor.takeover.close()
        if endpoint is not None:
            await asyncio.to_thread(unregister, endpoint)
        await supervisor.stop()
        remove_signals()
        remove_reload()
        remove_replace()
    log.info("serve_stopped", exit_code=code)
    return code

