"""The edge connection API: what the stdio front door, the WebSocket gateway,
the bridge tests and the benchmarks call (docs/contracts.md).

```python
runtime = await open_runtime(cfg, version=__version__,
                             start_services=start_embedded)  # empty addresses: embedded
await serve_connection(runtime, incoming, send, caller=LOCAL_OPERATOR, default_agent="")
await runtime.close()                          # closes every session, stops embedded services
```
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from services.common.config import Config
from services.common.grpc_auth import GrpcSecurity
from services.common.logs import get_logger
from services.edge.caller import LOCAL_OPERATOR, Caller
from services.edge.dialect.a2a.methods import A2A_ADAPTER_METHODS
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.method_table import DIALECTS, fallback
from services.edge.metrics import Metrics
from services.edge.sessions import runtime as _runtime
from services.edge.sessions.runtime import EdgeRuntime, StartServices

__all__ = ["LOCAL_OPERATOR", "Caller", "EdgeRuntime", "Metrics", "open_runtime",
           "serve_connection"]

log = get_logger("edge.connection")


async def open_runtime(cfg: Config, *, version: str, start_services: StartServices | None = None,
                       health_timeout: float = 10.0,
                       security: GrpcSecurity | None = None, worker: int = 0) -> EdgeRuntime:
    """The edge runtime (``services.edge.sessions.runtime.open_runtime``) serving the session tools'
    extension methods to its adapters; ``worker``: the edge's number among
    several on one port (0: the only one)."""
    return await _runtime.open_runtime(cfg, version=version, start_services=start_services,
                                       health_timeout=health_timeout,
                                       adapter_methods=A2A_ADAPTER_METHODS, security=security,
                                       worker=worker)


async def serve_connection(
    runtime: EdgeRuntime,
    incoming: AsyncIterator[str],
    send: Callable[[str], Awaitable[None]],
    *,
    caller: Caller,
    default_agent: str = "",
    remote: bool = False,
    drain_secs: float = 15.0,
    abort: asyncio.Event | None = None,
    send_many: Callable[[list[str]], Awaitable[None]] | None = None,
    revoked: asyncio.Event | None = None,
    stopping: asyncio.Event | None = None,
) -> None:
    """Serve one client connection until ``incoming`` ends.

    ``incoming`` yields one JSON-RPC message per item (a stdio line or a
    WebSocket text frame); ``send`` writes one message. ``default_agent`` is the
    connection default alias (the WebSocket URL's ``?agent=``; blank = none).
    When ``incoming`` ends (EOF, disconnect) the connection's pending
    back-channel requests fail as "client gone"; requests still running get
    ``drain_secs`` to finish (or until ``abort`` is set), then are cancelled;
    then its sessions are released (adapters closed through the lifecycle
    service, stored rows kept).

    ``caller`` is who the connection acts as (:mod:`services.edge.caller`):
    ``LOCAL_OPERATOR`` for the machine's local user (stdio, a gateway without
    auth), ``client_caller(<token id>)`` for an authenticated gateway client,
    whose sessions are owned by ``client:<token id>`` and who sees only those
    (SPEC §8 session/list "visible to the caller", §14).

    ``remote`` is True for a gateway client (any WebSocket connection, with or
    without auth) and False for the local stdio user: a remote client's
    ``mcpServers`` are bound by ``[gateway] client_mcp_servers``.

    ``send_many``, when the transport has one, writes several messages in order
    and together without a lock here; the transport then sees (and bounds)
    every answer that waits for the client. Without it, ``send`` is serialized.

    ``revoked`` is set when the connection's token is revoked (the transport then closes
    it): its running turns are cancelled at once and nothing of them is stored, and
    whatever it still sends is refused (``DialectConnection.revoke``).

    ``stopping`` is set when the gateway stops: the connection's running
    turns are cancelled at once (ACP ``session/cancel``; their prompts answer
    ``cancelled``), what it asks from then on is refused, the requests it read get
    ``drain_secs`` to be answered, and then this returns without waiting for ``incoming``
    to end — the transport then delivers what was sent and closes the connection.
    """
    conn = DialectConnection(runtime, send, dialects=DIALECTS,
                             fallback=fallback,
                             default_agent=default_agent,
                             caller=caller, remote=remote, send_many=send_many,
                             # A gateway client's sessions outlive it a while.
                             detach_grace_secs=float(runtime.cfg.gateway.detach_grace_secs)
                             if remote else 0.0)
    watch = asyncio.ensure_future(_revoke_when(revoked, conn)) if revoked is not None else None
    # At most MAX_IN_FLIGHT requests at once; reading waits past it.
    reading = asyncio.ensure_future(conn.rpc.serve(conn.read(incoming)))
    stopped = (asyncio.ensure_future(_quiet_when(stopping, conn, drain_secs))
               if stopping is not None else None)
    try:
        await asyncio.wait([t for t in (reading, stopped) if t is not None],
                           return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            reading.result()  # its failure is the connection's
    finally:
        for task in (watch, reading, stopped):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (reading, stopped) if t is not None),
                             return_exceptions=True)
        if revoked is not None and revoked.is_set():
            conn.revoke()  # (the watch may not have run yet)
        quiet = stopped is not None and stopped.done() and not stopped.cancelled()
        # After a stop's drain, what still runs is cancelled at once; a connection whose
        # input had ended before the stop gives up its drain when the stop comes.
        await conn.close(drain_secs=0.0 if quiet else drain_secs, abort=abort or stopping)


async def _revoke_when(revoked: asyncio.Event, conn: DialectConnection) -> None:
    """Revoke ``conn`` as soon as ``revoked`` is set, not only once its input has ended."""
    await revoked.wait()
    conn.revoke()


async def _quiet_when(stopping: asyncio.Event, conn: DialectConnection,
                      drain_secs: float) -> None:
    """Once ``stopping`` is set: cancel ``conn``'s turns, refuse its new requests, and wait
    (at most ``drain_secs``) until what it read is answered — saying what it waits for."""
    await stopping.wait()
    turns = conn.stop()
    running = conn.rpc.running
    if not running:
        return
    loop = asyncio.get_running_loop()
    started = loop.time()
    log.info("connection_stopping", cancelled_turns=turns, requests=running,
             wait_secs=drain_secs)
    await conn.rpc.drain(drain_secs)
    log.info("connection_quiet", waited_secs=round(loop.time() - started, 2),
             unanswered=conn.rpc.running)
