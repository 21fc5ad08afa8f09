"""``/healthz`` and ``/metrics`` of the gateway, from what its front doors count.

Pure rendering stays in ``services.edge.transport.http``; this gathers the values: the
services' health and leases (:class:`~services.edge.transport.probe.ServiceProbe`), the
runtime's counters, and :class:`GatewayCounters`, which the WebSocket and the
Streamable HTTP sides of the gateway both write. With several edge workers on one
port both answer for the host: every live worker's counters summed
(:mod:`services.edge.transport.worker_counters`), and ``/healthz`` says how many
workers serve — with a board (:mod:`services.common.worker_board`), 503 until every
worker serves, naming those it waits for — and ``/metrics`` shows each worker's
connections (``acpgate_worker_connections{worker="k"}``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from services.edge.metrics import Metrics
from services.edge.sessions.worker_link import WorkerLink
from services.edge.transport.admission import LiveConnections
from services.edge.transport.balance import Balancer
from services.edge.transport.http import GatewayGauges, HealthReport, render_metrics
from services.edge.transport.probe import ServiceProbe
from services.edge.transport.worker_counters import counters_of, summed

__all__ = ["SERVING_STALE_SECS", "GatewayCounters", "Monitor", "join_workers"]

#: A worker whose heartbeat on the board is older than this does not serve (stopped, hung).
SERVING_STALE_SECS: Final = 10.0


@dataclass
class GatewayCounters:
    """What the gateway counts itself (every front door of it)."""

    connections_total: int = 0
    rejected_unauthorized_total: int = 0
    slow_client_closes_total: int = 0
    http_connections_total: int = 0
    http_slow_client_closes_total: int = 0


@dataclass
class Monitor:
    """Renders ``/healthz`` and ``/metrics``."""

    probe: ServiceProbe
    metrics_of: Callable[[], Metrics]
    counters: GatewayCounters
    live: LiveConnections[object]
    #: Open Streamable HTTP connections and SSE streams (the rest of ``live`` is WebSocket).
    http_connections: Callable[[], int]
    sse_streams: Callable[[], int]
    revoked_closes: Callable[[], int]

    #: This edge's link to the other workers on its port (None: the only edge).
    workers: WorkerLink | None = None
    #: This worker's side of the workers' board (None: the only edge, or no board).
    balancer: Balancer | None = None

    async def health(self) -> tuple[int, str]:
        """(status, body) of ``/healthz``: 200 when both services serve and — with several
        workers and their board — every worker serves, else 503 naming the workers it waits
        for; with several workers, how many serve (this one included; without the board,
        how many report); the store when it is in memory."""
        workers: int | None = None
        waiting: tuple[int, ...] = ()
        if self.balancer is not None:
            now, stale = time.monotonic_ns(), int(SERVING_STALE_SECS * 1e9)
            serving = {s.worker for s in self.balancer.board.slots() if s.serves(now, stale)}
            workers = len(serving)
            waiting = tuple(n for n in range(1, self.balancer.board.workers + 1)
                            if n not in serving)
        elif self.workers is not None:
            workers = 1 + len(await self.workers.peers())
        services, store = await asyncio.gather(self.probe.health(), self.probe.store())
        report = HealthReport(services=services, workers=workers, store=store,
                              waiting_for=waiting)
        return report.status_code, report.body()

    def _gauges(self, health: Mapping[str, str] | None = None,
                leases: Mapping[str, int] | None = None) -> GatewayGauges:
        c = self.counters
        http = self.http_connections()
        return GatewayGauges(
            connections=len(self.live) - http,
            connections_total=c.connections_total,
            rejected_unauthorized_total=c.rejected_unauthorized_total,
            rejected_busy=dict(self.live.rejected),
            slow_client_closes_total=c.slow_client_closes_total,
            revoked_closes_total=self.revoked_closes(),
            leases=leases,
            services_up={name: int(state == "SERVING") for name, state in (health or {}).items()},
            http_connections=http,
            http_connections_total=c.http_connections_total,
            http_slow_client_closes_total=c.http_slow_client_closes_total,
            sse_streams=self.sse_streams(),
        )

    def worker_counters(self) -> dict[str, int]:
        """This worker's own counters and gauges, as its reports carry them."""
        return counters_of(self.metrics_of(), self._gauges())

    async def metrics(self) -> str:
        """The Prometheus text of ``/metrics`` (with several workers: the host's)."""
        health, leases = await asyncio.gather(self.probe.health(), self.probe.leases_by_state())
        metrics, gauges = self.metrics_of(), self._gauges(health, leases)
        if self.workers is not None:
            peers = await self.workers.peers()
            own = {self.workers.worker: len(self.live)}
            metrics, gauges = summed(metrics, gauges, peers.values())
            gauges = dataclasses.replace(gauges, worker_connections={
                **{n: t.get("connections", 0) + t.get("http_connections", 0)
                   for n, t in peers.items() if n}, **own})
        return render_metrics(metrics, gauges)


def join_workers(link: WorkerLink | None, live: LiveConnections[object], monitor: Monitor,
                 balancer: Balancer | None = None) -> None:
    """With several edge workers (``link``): the connections are admitted, and ``/metrics``
    and ``/healthz`` answered, for the host (``balancer``: the board, which says which
    workers serve); the worker's reports carry its connections and counters. Nothing for
    a lone edge."""
    if link is None:
        return
    live.shared = monitor.workers = link
    monitor.balancer = balancer
    link.add_picture(live.picture)
    link.set_counters(monitor.worker_counters)
