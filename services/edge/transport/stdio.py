"""``acpgate acp``: the dialect over stdin/stdout (SPEC §0, §1).

stdin lines go to :func:`serve_connection`; every message is written to stdout
as one line (the pipe plumbing is ``services.edge.transport.stdio_pipes``). The next line is
read only while the output backlog is under its bound: a client that stops
reading stdout stops stdin too, instead of growing this process. EOF (or
SIGTERM/SIGINT) closes every session, stops the embedded services and returns
0 with no child process left behind. SIGHUP reloads the config (the embedded
session service's agents, the limits, the logs) and never ends the process.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import replace

from services.common.config import Config
from services.common.gc_tuning import tune_gc
from services.common.jsonrpc import read_lines
from services.common.live_config import LiveConfig
from services.common.logs import get_logger
from services.common.signals import install_reload_signal, install_stop_signals
from services.edge.backends.errors import ServiceError
from services.edge.sessions.runtime import StartServices
from services.edge.transport.connection import (
    LOCAL_OPERATOR,
    EdgeRuntime,
    open_runtime,
    serve_connection,
)
from services.edge.transport.stdio_pipes import stdin_reader, stdout_writer

log = get_logger("edge.stdio")

#: How long `acpgate acp` waits for configured services before running them itself.
CONFIGURED_SERVICES_WAIT_SECS = 3.0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ServiceError):
        return exc.detail
    return str(exc)


async def _open_runtime_for_stdio(cfg: Config, version: str,
                                  start_services: StartServices) -> EdgeRuntime:
    """Configured services if they answer, else embedded ones (SPEC §0).

    An IDE launching ``acpgate acp`` must get its handshake answered: when the
    ``[services]`` addresses do not answer, the services run embedded on the
    same data dir instead of the process dying before ``initialize``.
    """
    if not (cfg.services.session_addr or cfg.services.lifecycle_addr):
        return await open_runtime(cfg, version=version, start_services=start_services)
    try:
        return await open_runtime(cfg, version=version, start_services=start_services,
                                  health_timeout=CONFIGURED_SERVICES_WAIT_SECS)
    except (TimeoutError, OSError, ServiceError) as exc:
        log.warning("configured_services_unreachable_running_embedded", detail=_describe(exc),
                    session_addr=cfg.services.session_addr,
                    lifecycle_addr=cfg.services.lifecycle_addr)
        print("acpgate: the configured session/lifecycle services do not answer "
              f"({_describe(exc)}); running them embedded on {cfg.data_dir}", file=sys.stderr)
    embedded = replace(cfg, services=replace(cfg.services, session_addr="", lifecycle_addr=""))
    return await open_runtime(embedded, version=version, start_services=start_services)


async def run_stdio(cfg: Config, *, version: str, start_services: StartServices,
                    live: LiveConfig | None = None) -> int:
    """Serve the dialect on stdio until EOF; returns the exit code (0; 1 when nothing starts).

    ``version`` is acpgate's (both handshakes report it); ``start_services``
    runs the services ``[services]`` leaves empty, or that do not answer,
    inside this process (``acpgate.embedded.start_embedded``); SIGHUP reloads ``live``
    (the runtime takes its limits; whoever started the services subscribed them).
    """
    try:
        runtime = await _open_runtime_for_stdio(cfg, version, start_services)
    except (TimeoutError, OSError, ServiceError) as exc:
        log.error("services_unavailable", detail=_describe(exc))
        print(f"acpgate: cannot start the session/lifecycle services: {_describe(exc)}",
              file=sys.stderr)
        return 1
    tune_gc()
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop, (signal.SIGTERM, signal.SIGINT))
    if live is not None:
        live.subscribe(runtime.use_config)
    remove_reload = install_reload_signal(live.reload_soon if live else lambda: None)
    try:
        reader = await stdin_reader()
        stdout = await stdout_writer()

        async def next_line(lines: AsyncIterator[str]) -> str:
            await stdout.room()  # a stuck stdout stops stdin
            return await anext(lines)

        async def incoming() -> AsyncIterator[str]:
            lines = read_lines(reader)
            while True:
                nxt = asyncio.ensure_future(next_line(lines))
                stopper = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if nxt not in done:
                    nxt.cancel()
                    return
                try:
                    yield nxt.result()
                except StopAsyncIteration:
                    return

        try:
            # EOF: what was asked still gets answered (a CI runner pipes requests
            # and closes stdin); a signal cuts that short.
            await serve_connection(runtime, incoming(), stdout.send, caller=LOCAL_OPERATOR,
                                   send_many=stdout.send_many,
                                   drain_secs=float(cfg.acp.session_timeout_secs), abort=stop)
        finally:
            await stdout.close()
    finally:
        await runtime.close()
        remove_signals()
        remove_reload()
    log.info("stdio_edge_exit")
    return 0
