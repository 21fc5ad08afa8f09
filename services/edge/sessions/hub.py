"""The edge process's hub: what every session of one edge process shares, with no session type.

:class:`EdgeHub` holds the clients of the session and lifecycle services, who this edge is
(name and version, for both ACP handshakes), the registry of active sessions with the
``max_sessions`` slots and each token's share of them (SPEC §9), the replay rings' one budget, the sessions' event log
(:mod:`.event_log`), this host's claims on the sessions it serves, the warm pools, the link
to sibling edge workers, the adapter requests the edge serves itself, and the background
tasks of the process. A live session (``EdgeSession``) holds the hub, never the runtime
above it, so the session module needs nothing of the runtime's.

The hub is generic over the session type it holds (``S``) and declares the four session
operations only the runtime above it can do (:meth:`EdgeHub.activate`, ``remove``,
``deactivate``, ``release``): whoever makes a hub must make the
:class:`~services.edge.sessions.runtime.EdgeRuntime` that implements them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Generic, Protocol, TypeVar

from services.common.acp.schema import Implementation
from services.common.config import Config
from services.common.logs import get_logger
from services.common.principals import token_id_of
from services.edge.backends.channels import Channel
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.lifecycle import LifecycleBackend
from services.edge.backends.session import SessionBackend
from services.edge.metrics import Metrics
from services.edge.sessions.claims import HostClaims
from services.edge.sessions.event_log import EventLog
from services.edge.sessions.registry import (
    Registered,
    SessionRegistry,
    TokenShares,
    token_session_share,
)
from services.edge.sessions.ring_budget import RingBudget
from services.edge.sessions.warm import WarmPools
from services.edge.sessions.worker_link import WorkerLink
from services.edge.tokens import GRANT_SEE_ALL, TokenStore

__all__ = ["EDGE_NAME", "EDGE_TITLE", "EdgeHub", "Held"]

log = get_logger("edge.runtime")

#: How the edge names itself in ACP ``Implementation`` objects (agentInfo, clientInfo).
EDGE_NAME = "acpgate"
EDGE_TITLE = "acpgate ACP Gateway"


class Held(Registered, Protocol):
    """What the hub reads of a live session it holds (an ``EdgeSession``): what its
    registry reports and counts, and how it is lost to another host."""

    def lose(self) -> None:
        """Another host took the session over: stop serving it here."""


S = TypeVar("S", bound=Held)


class EdgeHub(ABC, Generic[S]):
    """What one edge process shares across its sessions (module doc)."""

    def __init__(
        self,
        cfg: Config,
        session_channel: Channel,
        lifecycle_channel: Channel,
        *,
        version: str,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        adapter_methods: Mapping[str, Callable[[S, dict[str, Any]], Awaitable[Any]]]
        | None = None,
        worker: int = 0,
    ) -> None:
        self.cfg = cfg
        #: Adapter→client requests the edge serves itself (method → handler).
        self.adapter_methods: Mapping[str, Callable[[S, dict[str, Any]], Awaitable[Any]]] = \
            adapter_methods or {}
        #: acpgate's version, as both handshakes report it.
        self.version = version
        self.metrics = metrics or Metrics()
        self.clock = clock
        #: The session service (store, aliases, visibility, policy).
        self.session_service = SessionBackend(session_channel)
        self.lifecycle = LifecycleBackend(lifecycle_channel)  # its fds: see open_runtime
        self._channels = [session_channel, lifecycle_channel]
        self.ring_budget = RingBudget.of_edge(cfg.gateway, worker, self.metrics)
        self.registry: SessionRegistry[S] = SessionRegistry(
            cfg.acp.max_sessions, token_session_share(cfg.acp))
        #: Each token's share, from the number of active tokens (services.edge.sessions.shares).
        self.shares = TokenShares(cfg.acp, cfg.token_db_path)
        #: With several edge workers on one port (``--worker``): this one's link to the
        #: others, through the session service (services.edge.sessions.worker_link); None: the only edge.
        self.workers = WorkerLink(self.session_service, worker) if worker else None
        #: The warm adapter pools this edge declared (services.edge.sessions.warm).
        self.warm = WarmPools(self.session_service, self.lifecycle)
        self.persistent = True
        #: Why the session service keeps sessions in memory ("" when it stores them).
        self.store_reason = ""
        self.gateway_instance_id = ""
        #: This host's claims on the sessions it serves (several hosts, one store).
        self.claims = HostClaims(self.session_service, cfg.gateway.public_url)
        self.event_log = EventLog(self.session_service, self.claims.fence, self._claim_lost,
                                  max_pending=cfg.store.outage_buffer_bytes)
        #: The gateway tokens, for their operator grants.
        self._tokens = TokenStore(cfg.token_db_path)
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def implementation(self) -> Implementation:
        """This edge as an ACP ``Implementation``: agentInfo to clients, clientInfo to adapters."""
        return Implementation(name=EDGE_NAME, title=EDGE_TITLE, version=self.version)

    def _claim_lost(self, session_id: str) -> None:
        """Another host took this session over: stop serving it here at once (a running
        turn answers that it was not stored)."""
        session = self.registry.active.get(session_id)
        if session is not None:
            session.lose()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run a background task owned by the runtime (kept referenced, awaited on close)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def sees_all(self, principal: str) -> bool:
        """Whether ``principal``'s token (active) holds the operator grant ``see-all``. Read
        per call, so ``acpgate token grant`` / ``revoke-grant`` count at once; a store that
        cannot be read grants nothing. A fact about the caller's credential, like its
        principal (the edge holds the token store): what the grant lets it see is the
        session service's decision (``services.session.decisions.visibility``)."""
        token_id = token_id_of(principal)
        if not token_id:
            return False
        try:
            grants = await asyncio.to_thread(self._tokens.grants_of, token_id)
        except sqlite3.Error as exc:
            log.warning("token_grants_unreadable", why=str(exc))
            return False
        return GRANT_SEE_ALL in grants

    # ------------------------------------------------------------------ sessions (the runtime's)

    @abstractmethod
    def activate(self, session: S) -> None:
        """Enter a started session into the active set (its slot was reserved)."""

    @abstractmethod
    def remove(self, session: S) -> bool:
        """Take a session out of the active set at once; False if it was not there."""

    @abstractmethod
    async def deactivate(self, session: S, reason: str) -> None:
        """Remove a session and release its adapter (the stored record stays)."""

    @abstractmethod
    async def release(self, session: S, reason: str) -> None:
        """Release the session's dependents, then the session (idempotent)."""

    async def close_lease(self, lease_id: str, session_key: str, reason: str) -> None:
        """lifecycle ``CloseSession`` (verify, then reap); failures are logged, not raised."""
        if not lease_id and not session_key:
            return
        try:
            closed = await self.lifecycle.close_session(
                lease_id=lease_id, session_key=session_key if not lease_id else "",
                reason=reason)
            if closed.unverified_reason:
                log.warning("close_unverified", lease_id=lease_id, why=closed.unverified_reason)
        except ServiceError as exc:
            if not lease_id and exc.kind is Failure.NOT_FOUND:
                return  # the session never got a lease (its ensure was refused)
            log.warning("close_session_failed", lease_id=lease_id, code=exc.code,
                        detail=exc.detail)
