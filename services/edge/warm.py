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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from acpgate.lifecycle.v1 import lifecycle_pb2
from acpgate.session.v1 import session_pb2
from services.common.logs import get_logger

if TYPE_CHECKING:
    from acpgate.lifecycle.v1.lifecycle_pb2_grpc import LifecycleServiceAsyncStub
    from acpgate.session.v1.session_pb2_grpc import SessionServiceAsyncStub

log = get_logger("edge.warm")

#: Least time between two declarations of one pool after cold takes.
REDECLARE_SECS = 5.0


def pool_name(alias: str) -> str:
    """The lifecycle pool of ``alias``'s warm adapters."""
    return f"agent:{alias}"


def keep_request(agent: session_pb2.ResolvedAgent) -> lifecycle_pb2.KeepWarmRequest:
    """``KeepWarm`` for a resolved agent: its launch spec, in its agent workspace."""
    return lifecycle_pb2.KeepWarmRequest(
        pool=pool_name(agent.alias), command=agent.command, args=list(agent.args),
        env=dict(agent.env), cwd=agent.agent_workspace, watch_paths=list(agent.watch_paths),
        count=agent.warm)


class WarmPools:
    """Declares the pools of one edge runtime and keeps them declared."""

    def __init__(self, session_stub: SessionServiceAsyncStub,
                 lifecycle_stub: LifecycleServiceAsyncStub,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session_stub
        self._lifecycle = lifecycle_stub
        self._clock = clock
        self._declared: dict[str, float] = {}

    async def declare_all(self) -> None:
        """Ask the session service which agents keep warm adapters; declare each pool."""
        try:
            resp = await self._session.ListWarmAgents(session_pb2.ListWarmAgentsRequest())
        except grpc.aio.AioRpcError as exc:
            log.warning("warm_agents_unavailable", code=exc.code().name, detail=exc.details())
            return
        for agent in resp.agents:
            await self.declare(agent)

    async def declare(self, agent: session_pb2.ResolvedAgent) -> None:
        """``KeepWarm`` for one agent; failures are logged (sessions then start cold)."""
        self._declared[agent.alias] = self._clock()
        try:
            await self._lifecycle.KeepWarm(keep_request(agent))
        except grpc.aio.AioRpcError as exc:
            log.warning("keep_warm_failed", alias=agent.alias, code=exc.code().name,
                        detail=exc.details())

    def pool_for(self, agent: session_pb2.ResolvedAgent) -> str:
        """The pool an ``EnsureSession`` for ``agent`` names ("" when it keeps none warm)."""
        return pool_name(agent.alias) if agent.warm > 0 else ""

    def took_cold(self, agent: session_pb2.ResolvedAgent) -> bool:
        """A take of ``agent``'s pool came back cold: True when the pool is due to be
        declared again (then the caller runs :meth:`declare` in the background)."""
        if agent.warm <= 0:
            return False
        last = self._declared.get(agent.alias)
        return last is None or self._clock() - last >= REDECLARE_SECS
