"""The edge's side of the warm pools: which aliases to keep warm, and their pool names.

The session service decides which aliases keep adapters warm and how to
launch them (``ListWarmAgents``); the lifecycle service spawns, holds and
reaps them (``KeepWarm``); the edge only connects the two. It declares every
pool when it starts, names the pool in ``EnsureSession`` so a session takes a
warm adapter, and declares a pool again (at most every
:data:`REDECLARE_SECS`) when a take came back cold — the lifecycle service
may have restarted and forgotten it. A taken adapter is attached and
initialized by the edge exactly like a freshly spawned one (rule 2: only the
edge speaks ACP), so a warm adapter never carries one client's capabilities
into another's session.

``session/new`` takes its warm adapter early (:meth:`WarmPools.take_early`):
while the session service decides the session, a stream already takes an
adapter of the pool of the alias the session will most likely get — the one
asked for, else the connection's or the configured default — without
spawning (``warm_only``: the cwd is not decided yet), and sends it the
``initialize`` that alias's autonomy level calls for. The session service's
answer decides (rule 3: the edge only guesses ahead): when it chose that
alias with that launch spec, and its policy calls for that very
``initialize``, the adapter serves the session; otherwise, or when the
session is refused, the adapter is let go (closed, or back in its pool if
the stream never reached it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.common.logs import get_logger
from services.common.protocol import M_INITIALIZE, session_key_for
from services.edge.adapter.agent_meta import foreign
from services.edge.adapter.client import SETUP_TIMEOUT_SECS
from services.edge.adapter.link import AdapterLink, seen
from services.edge.backends.errors import ServiceError
from services.edge.backends.lifecycle import AttachSpec, EnsureSpec, LifecycleBackend

if TYPE_CHECKING:
    pass
from services.edge.backends.session_types import ResolvedAgent

if TYPE_CHECKING:
    from services.edge.backends.session import SessionBackend

log = get_logger("edge.warm")

#: Least time between two declarations of one pool after cold takes.
REDECLARE_SECS = 5.0


def pool_name(alias: str) -> str:
    """The lifecycle pool of ``alias``'s warm adapters."""
    return f"agent:{alias}"


class WarmPools:
    """Declares the pools of one edge runtime and keeps them declared."""

    def __init__(self, session_service: SessionBackend,
                 lifecycle: LifecycleBackend,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session_service
        self._lifecycle = lifecycle
        self._clock = clock
        self._declared: dict[str, float] = {}
        #: The launch spec each declared pool was given, by alias.
        self._agents: dict[str, ResolvedAgent] = {}

    async def declare_all(self) -> set[str] | None:
        """Ask the session service which agents keep warm adapters; declare each pool.
        Their aliases, or None when the session service could not say (logged)."""
        try:
            agents = await self._session.list_warm_agents()
        except ServiceError as exc:
            log.warning("warm_agents_unavailable", code=exc.code, detail=exc.detail)
            return None
        for agent in agents:
            await self.declare(agent)
        return {agent.alias for agent in agents}

    async def redeclare(self) -> None:
        """After a config reload: declare every pool again (a changed launch spec replaces
        its adapters), and empty the pools of agents that keep none warm any more."""
        before = dict(self._agents)
        kept = await self.declare_all()
        if kept is None:
            return  # the pools stay as they are
        for alias, agent in before.items():
            if alias not in kept:
                await self.declare(dataclasses.replace(agent, warm=0))
                del self._agents[alias]

    async def declare(self, agent: ResolvedAgent) -> None:
        """``KeepWarm`` for one agent; failures are logged (sessions then start cold)."""
        self._declared[agent.alias] = self._clock()
        self._agents[agent.alias] = agent
        try:
            await self._lifecycle.keep_warm(
                pool_name(agent.alias), agent.launch, agent.agent_workspace,
                agent.watch_paths, agent.warm)
        except ServiceError as exc:
            log.warning("keep_warm_failed", alias=agent.alias, code=exc.code,
                        detail=exc.detail)

    def ensure_request(self, agent: ResolvedAgent, session_key: str, cwd: str = "",
                       *, warm_only: bool = False) -> EnsureSpec:
        """lifecycle's ``EnsureSession`` for ``session_key``: a warm adapter of ``agent``'s pool
        when it keeps one, else a fresh spawn in ``cwd`` (``warm_only``: never a spawn)."""
        return EnsureSpec(session_key=session_key, launch=agent.launch, cwd=cwd,
                          warm_pool=self.pool_for(agent), warm_only=warm_only)

    def pool_for(self, agent: ResolvedAgent) -> str:
        """The pool an ``EnsureSession`` for ``agent`` names ("" when it keeps none warm)."""
        return pool_name(agent.alias) if agent.warm > 0 else ""

    def took_cold(self, agent: ResolvedAgent) -> bool:
        """A take of ``agent``'s pool came back cold: True when the pool is due to be
        declared again (then the caller runs :meth:`declare` in the background)."""
        if agent.warm <= 0:
            return False
        last = self._declared.get(agent.alias)
        return last is None or self._clock() - last >= REDECLARE_SECS

    def take_early(self, alias: str, session_id: str,
                   initialize: Callable[[str], dict[str, Any]]) -> EarlyTake | None:
        """Start taking a warm adapter of ``alias``'s pool for new session ``session_id``
        while the session service decides it, ``initialize(autonomy)`` (the params for the
        alias's autonomy level) queued behind the open; None when ``alias`` keeps no pool."""
        agent = self._agents.get(alias)
        if agent is None or agent.warm <= 0:
            return None
        link = AdapterLink(self._lifecycle, AttachSpec(ensure=self.ensure_request(
            agent, session_key_for(alias, session_id), warm_only=True)), foreign=foreign(agent),
            protocol=agent.protocol)
        link.begin()
        params = initialize(agent.autonomy)
        answer = asyncio.ensure_future(link.request(M_INITIALIZE, params, SETUP_TIMEOUT_SECS))
        answer.add_done_callback(seen)  # a dropped take's failure is nobody's error
        return EarlyTake(agent, link, params, answer)


@dataclass(frozen=True)
class EarlyTake:
    """A warm adapter being taken, and initialized, for a session the session service is
    still deciding."""

    #: The pool's agent as declared (what the session is expected to resolve to).
    agent: ResolvedAgent
    #: The stream taking it (begun, not yet bound to a client).
    link: AdapterLink
    #: The ``initialize`` params it was sent, and their answer to come.
    initialize: dict[str, Any]
    answer: asyncio.Future[Any]

    def serves(self, resolved: ResolvedAgent, initialize: dict[str, Any]) -> bool:
        """True when the session service chose this very alias and launch spec, and the
        session calls for the ``initialize`` that was sent."""
        mine = self.agent
        return (resolved.alias, resolved.kind, resolved.launch, resolved.warm > 0,
                initialize) == (mine.alias, mine.kind, mine.launch, True, self.initialize)
