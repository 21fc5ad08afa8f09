"""``/healthz`` and ``/metrics`` of the gateway, from what its front doors count.

Pure rendering stays in ``services.edge.transport.http``; this gathers the values: the
services' health and leases (:class:`~services.edge.transport.probe.ServiceProbe`), the
runtime's counters, and :class:`GatewayCounters`, which the WebSocket and the
Streamable HTTP sides of the gateway both write. With several edge workers on one
port (issue 28) both answer for the host: every live worker's counters summed
(:mod:`services.edge.transport.worker_counters`), and ``/healthz`` says how many
workers report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from services.edge.metrics import Metrics
from services.edge.sessions.workers import WorkerLink
from services.edge.transport.admission import LiveConnections
from services.edge.transport.http import GatewayGauges, HealthReport, render_metrics
from services.edge.transport.probe import ServiceProbe
from services.edge.transport.worker_counters import counters_of, summed

__all__ = ["GatewayCounters", "Monitor", "join_workers"]


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

    async def health(self) -> tuple[int, str]:
        """(status, body) of ``/healthz``: 200 when both services serve, else 503; with
        several workers, how many of them report (this one included); the store when it
        is in memory."""
        workers = None
        if self.workers is not None:
            workers = 1 + len(await self.workers.peers())
        services, store = await asyncio.gather(self.probe.health(), self.probe.store())
        report = HealthReport(services=services, workers=workers, store=store)
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
            metrics, gauges = summed(metrics, gauges, await self.workers.peers())
        return render_metrics(metrics, gauges)


def join_workers(link: WorkerLink | None, live: LiveConnections[object], monitor: Monitor) -> None:
    """With several edge workers (``link``): the connections are admitted, and ``/metrics``
    and ``/healthz`` answered, for the host; the worker's reports carry its connections
    and counters. Nothing for a lone edge."""
    if link is None:
        return
    live.shared = monitor.workers = link
    link.add_picture(live.picture)
    link.set_counters(monitor.worker_counters)
