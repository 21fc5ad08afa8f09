"""The edge runtime shared by every client connection of one process.

It is the process's hub (:class:`~services.edge.sessions.hub.EdgeHub`: the clients of the
session and lifecycle services, who this edge is, the registry of active sessions with the
``max_sessions`` slots and each token's share of them (SPEC §9), the replay rings' one
budget, the sessions' event log, this host's claims) and runs the live sessions on it:
their start into the active set, the idle reaper, the claims' heartbeat, the re-adoption of
a dead predecessor's sessions, and the one way a session is released: its dependents first (the
sessions it spawned and those the edge runs for it), then adapter detached, lease closed
through lifecycle ``CloseSession``, row inactive, claim dropped (never deleted), ring let
go. The session tools are handed in by whoever composes the runtime.

The edge never starts a service itself. When ``[services]`` leaves an address empty
(embedded mode), whoever composes the process passes a :data:`StartServices`
(``acpgate.embedded.start_embedded``) that starts the missing ones, stopped at close.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from services.common.attach_protocol import DROP_SESSION_ENDED
from services.common.config import Config
from services.common.config.reload import reloaded
from services.common.grpc_auth import GrpcSecurity, load_security
from services.common.logs import get_logger
from services.edge.backends.channels import Channel, dial, wait_serving
from services.edge.backends.fds import FdDialer
from services.edge.metrics import Metrics
from services.edge.sessions import detached, readopt
from services.edge.sessions.clients import DetachedPort, let_go
from services.edge.sessions.hosted_port import HostedPort
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.registry import token_session_share
from services.edge.sessions.session import AdapterMethod, EdgeSession
from services.edge.sessions.shares import releasable_picture, release_ordered

log = get_logger("edge.runtime")

#: Longest pause between idle-reaper sweeps.
REAPER_MAX_INTERVAL_SECS = 30.0
#: How long a shutdown waits for detached sessions' cancelled turns to end before release.
DETACHED_STOP_WAIT_SECS = 5.0


class ServiceHost(Protocol):
    """Services started for this process (embedded mode), and where both services are.

    ``session_addr`` and ``lifecycle_addr`` are the addresses to dial: the
    configured one where ``[services]`` names one, else the one just started.
    """

    session_addr: str
    lifecycle_addr: str
    #: The service credential (and TLS) to dial both addresses with.
    security: GrpcSecurity

    def local_channel(self, address: str) -> Channel | None:
        """A channel straight into the service this host runs at ``address`` (no socket
        between the edge and it), or None to dial the address."""

    async def stop(self) -> None:
        """Stop whatever was started here."""


#: Starts, inside this process, the services whose ``[services]`` address is empty.
StartServices = Callable[[Config], Awaitable[ServiceHost]]


class EdgeRuntime(EdgeHub[EdgeSession]):
    """Everything one edge process shares across connections (see docs/contracts.md): the
    hub its sessions hold, and the live sessions' start, release, reaper and shutdown."""

    def __init__(
        self,
        cfg: Config,
        session_channel: Channel,
        lifecycle_channel: Channel,
        *,
        version: str,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        adapter_methods: Mapping[str, AdapterMethod] | None = None,
        worker: int = 0,
    ) -> None:
        super().__init__(cfg, session_channel, lifecycle_channel, version=version,
                         metrics=metrics, clock=clock, adapter_methods=adapter_methods,
                         worker=worker)
        self._hosted: ServiceHost | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._reports: asyncio.Task[None] | None = None
        self._closed = False

    async def _start(self) -> None:
        status = await self.session_service.store_status()
        self.persistent = status.persistent
        self.store_reason = "" if status.persistent else status.fallback_reason
        if not status.persistent:
            log.warning("store_in_memory", reason=status.fallback_reason)
        instance = await self.lifecycle.get_instance()
        self.gateway_instance_id = instance.gateway_instance_id
        if self.workers is not None:  # its sessions are claimed by this worker, not its host
            self.gateway_instance_id = self.workers.configure(instance.gateway_instance_id)
            self.workers.add_picture(self.registry.picture)
            self.workers.add_picture(lambda: releasable_picture(self.registry))
            self.workers.set_releaser(lambda who, n: release_ordered(self, who, n))
            self.registry.on_change = self.workers.changed
            self._reports = asyncio.create_task(self.workers.run(), name="edge-worker-reports")
        self.claims.configure(self.gateway_instance_id, status.claim_ttl_ms)
        # A dead predecessor's sessions are taken up (their turns run on), the rest of its
        # running turns marked interrupted.
        adopted, given_up = await readopt.readopt(self)
        await readopt.give_up(self, given_up)
        await self.event_log.begin(self.gateway_instance_id, interrupt=not adopted)
        self._reaper = asyncio.create_task(self._reap_idle(), name="edge-idle-reaper")
        # In the background: the pools fill while the first client connects.
        self.spawn(self.warm.declare_all())
        self._heartbeat = asyncio.create_task(
            self.claims.heartbeat(self.registry.serving, self._claim_lost, self.registry.shapes),
            name="edge-claims")

    def use_config(self, cfg: Config) -> None:
        """A reloaded config: its limits hold for the next sessions (running ones keep
        their agent process), and the warm pools are declared again for its agents. The
        keys that need a restart keep this runtime's values."""
        self.cfg = reloaded(self.cfg, cfg)
        self.registry.max_sessions = self.cfg.acp.max_sessions
        self.registry.per_token = token_session_share(self.cfg.acp)
        self.shares.use(self.cfg.acp)
        if self._reaper is not None:  # started: the services answer
            self.spawn(self.warm.redeclare())

    # ------------------------------------------------------------------ sessions

    def activate(self, session: EdgeSession) -> None:
        """Enter a started session into the active set (its slot was reserved)."""
        self.registry.active[session.session_id] = session
        session.claim_generation = self.claims.generation(session.session_id)
        self.metrics.active_sessions = len(self.registry.active)
        self.registry.changed()

    def detached_token_ids(self) -> set[str]:
        """The ids of the gateway tokens whose sessions here wait detached (no client)."""
        return detached.token_ids(self.registry.active.values())

    async def end_detached(self, token_ids: set[str]) -> int:
        """Release every detached session of ``token_ids`` (their tokens were revoked): a
        running turn is cancelled and not stored, the agent released, the row kept."""
        ended = detached.of_tokens(list(self.registry.active.values()), token_ids)
        await asyncio.gather(*(self.deactivate(s, "revoked") for s in ended),
                             return_exceptions=True)
        return len(ended)

    def remove(self, session: EdgeSession) -> bool:
        """Take a session out of the active set at once; False if it was not there."""
        if self.registry.active.get(session.session_id) is not session:
            return False
        del self.registry.active[session.session_id]
        self.event_log.forget(session.session_id)
        self.metrics.active_sessions = len(self.registry.active)
        self.registry.changed()
        return True

    async def deactivate(self, session: EdgeSession, reason: str) -> None:
        """Remove a session and release its adapter (the stored record stays)."""
        self.remove(session)
        await self.release(session, reason)

    async def release(self, session: EdgeSession, reason: str) -> None:
        """Release the session's dependents, then detach the adapter, close the lease, mark
        the row inactive and drop this host's claim (never another host's). Idempotent: a
        second call returns once the first has finished.

        The work runs in a runtime task, so it is never stopped half-way: a caller that is
        cancelled (a connection's drain ran out, a setup given up) stops waiting, and the
        lease is closed all the same."""
        if session.releasing is None:
            session.released = True
            session.releasing = self.spawn(self._release(session, reason))
        await asyncio.shield(session.releasing)

    async def _release(self, session: EdgeSession, reason: str) -> None:
        dependents = self.dependents(session)
        if dependents:
            await asyncio.gather(*(self.deactivate(d, f"parent_{reason}") for d in dependents),
                                 return_exceptions=True)
        if session.turn is not None:
            session.cancel(keep=False)  # released: nothing of the turn is stored
        if isinstance(session.port, DetachedPort) and session.port.expiry is not None:
            session.port.expiry.cancel()  # its grace timer has nothing left to end
        session.clients.close_all(DROP_SESSION_ENDED)  # its other clients are told
        if isinstance(session.port, HostedPort):
            session.port.sessions.pop(session.session_id, None)
        if session.adapter is not None:
            with contextlib.suppress(Exception):
                await session.adapter.close()
        await self.close_lease(session.lease_id, session.session_key, reason)
        if session.row_write is not None:  # "inactive" after "active", never before
            await asyncio.wait((session.row_write,))
        await self.claims.release(session.session_id, session.claim_generation)
        session.feed.close()  # its ring no longer counts in the edge's budget
        let_go(session)  # a client connection that lives on keeps nothing of it
        log.info("session_released", session_id=session.session_id, reason=reason)

    def dependents(self, session: EdgeSession) -> list[EdgeSession]:
        """The live sessions that close with ``session``: those it spawned (by
        their stored parent key) and those the edge runs for it."""
        return [other for other in self.registry.active.values()
                if other is not session and (
                    (session.store_key and other.parent_key == session.store_key)
                    or (isinstance(other.port, HostedPort) and other.port.host is session))]

    async def _reap_idle(self) -> None:
        while True:  # the timeout read per sweep: a reload may change it
            timeout = float(self.cfg.acp.session_timeout_secs)
            await asyncio.sleep(max(0.05, min(timeout / 4, REAPER_MAX_INTERVAL_SECS)))
            for session in list(self.registry.active.values()):
                if session.turn is None and session.idle_for() >= timeout \
                        and not session.work.alive:  # background work keeps it alive
                    log.info("session_idle", session_id=session.session_id)
                    self.spawn(self.deactivate(session, "idle"))

    # ------------------------------------------------------------------ shutdown

    async def close(self) -> None:
        """Close every session, stop the embedded services, close channels."""
        if self._closed:
            return
        self._closed = True
        for task in (self._reaper, self._heartbeat, self._reports):
            if task is not None:
                task.cancel()
        await detached.cancel_turns(self.registry.active.values(), DETACHED_STOP_WAIT_SECS)
        sessions = list(self.registry.active.values())
        await asyncio.gather(*(self.deactivate(s, "shutdown") for s in sessions),
                             return_exceptions=True)
        await self.event_log.close()
        if self._reports is not None and self.workers is not None:
            await self.workers.report()  # what this worker held is free at once
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        self.shares.close()
        for channel in self._channels:
            with contextlib.suppress(Exception):
                await channel.close(None)
        if self._hosted is not None:
            with contextlib.suppress(Exception):
                await self._hosted.stop()


async def open_runtime(
    cfg: Config,
    *,
    version: str,
    start_services: StartServices | None = None,
    health_timeout: float = 10.0,
    adapter_methods: Mapping[str, AdapterMethod] | None = None,
    security: GrpcSecurity | None = None,
    worker: int = 0,
) -> EdgeRuntime:
    """Connect to the configured services, or have the missing ones started (SPEC §0).

    An empty ``[services]`` address needs ``start_services``, which runs that
    service inside this process (embedded mode, see ``acpgate.embedded``); the
    runtime stops it again on :meth:`EdgeRuntime.close`. Each service must
    report SERVING within ``health_timeout`` seconds. ``version`` is acpgate's
    version, passed in by the command line; ``adapter_methods`` the adapter
    requests the edge serves itself (``services.edge.transport.connection`` passes the
    session tools'). A dialled service is called with ``security``'s credential (default:
    the started services', else the install's, :func:`~services.common.grpc_auth.
    load_security`); an in-process channel needs none. ``worker``: this edge's number
    among several on one port (0: the only one; services.edge.sessions.worker_link).
    """
    hosted: ServiceHost | None = None
    session_addr = cfg.services.session_addr
    lifecycle_addr = cfg.services.lifecycle_addr
    session_channel: Channel | None = None
    lifecycle_channel: Channel | None = None
    try:
        if not session_addr or not lifecycle_addr:
            if start_services is None:
                raise ValueError("[services] leaves an address empty and no embedded "
                                 "service starter was given")
            hosted = await start_services(cfg)
            session_addr, lifecycle_addr = hosted.session_addr, hosted.lifecycle_addr
        local = [hosted.local_channel(a) if hosted is not None else None
                 for a in (session_addr, lifecycle_addr)]
        if None in local and security is None:  # dialled: the credential is needed
            security = hosted.security if hosted is not None else await load_security(cfg)
        session_channel = local[0] or dial(security, session_addr)
        lifecycle_channel = local[1] or dial(security, lifecycle_addr)
        for dialled, in_process in ((session_channel, local[0]), (lifecycle_channel, local[1])):
            if in_process is None:  # an in-process channel reaches a service already started
                await wait_serving(dialled, within=health_timeout)
    except BaseException:
        for opened in (session_channel, lifecycle_channel):
            if opened is not None:
                with contextlib.suppress(Exception):
                    await opened.close(None)
        if hosted is not None:
            with contextlib.suppress(Exception):
                await hosted.stop()
        raise
    runtime = EdgeRuntime(cfg, session_channel, lifecycle_channel, version=version,
                          adapter_methods=adapter_methods, worker=worker)
    runtime._hosted = hosted
    runtime.lifecycle.fds = FdDialer.of(  # where the adapters' pipes can come here
        cfg, lifecycle_addr, hosted.security if hosted else security)
    try:
        await runtime._start()
    except BaseException:
        await runtime.close()
        raise
    return runtime

