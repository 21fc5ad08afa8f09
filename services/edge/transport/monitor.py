"""``/healthz`` and ``/metrics`` of the gateway, from what its front doors count.

Pure rendering stays in ``services.edge.transport.http``; this gathers the values: the
services' health and leases (:class:`~services.edge.transport.probe.ServiceProbe`), the
runtime's counters, and :class:`GatewayCounters`, which the WebSocket and the
Streamable HTTP sides of the gateway both write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from services.edge.metrics import Metrics
from services.edge.transport.admission import LiveConnections
from services.edge.transport.http import GatewayGauges, HealthReport, render_metrics
from services.edge.transport.probe import ServiceProbe

__all__ = ["GatewayCounters", "Monitor"]


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

    async def health(self) -> tuple[int, str]:
        """(status, body) of ``/healthz``: 200 when both services serve, else 503."""
        report = HealthReport(services=await self.probe.health())
        return report.status_code, report.body()

    async def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        health, leases = await asyncio.gather(self.probe.health(), self.probe.leases_by_state())
        c = self.counters
        http = self.http_connections()
        gauges = GatewayGauges(
            connections=len(self.live) - http,
            connections_total=c.connections_total,
            rejected_unauthorized_total=c.rejected_unauthorized_total,
            rejected_busy=dict(self.live.rejected),
            slow_client_closes_total=c.slow_client_closes_total,
            revoked_closes_total=self.revoked_closes(),
            leases=leases,
            services_up={name: int(state == "SERVING") for name, state in health.items()},
            http_connections=http,
            http_connections_total=c.http_connections_total,
            http_slow_client_closes_total=c.http_slow_client_closes_total,
            sse_streams=self.sse_streams(),
        )
        return render_metrics(self.metrics_of(), gauges)
