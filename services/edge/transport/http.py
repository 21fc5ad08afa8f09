"""The gateway's two plain-HTTP endpoints: ``GET /healthz`` and ``GET /metrics``.

Both are rendered from values gathered by the caller (``services.edge.transport.monitor``),
so this module is pure: health is the edge's own liveness plus the gRPC health
of the session and lifecycle services; metrics are the edge runtime's counters
(``services/edge/metrics.py``) plus gateway gauges and leases by state, in the
Prometheus text exposition format (version 0.0.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from services.edge.metrics import Metrics

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Lease states as lowercase names (SPEC §13), always rendered, zero included.
LEASE_STATES = ("open", "closing", "closed", "lost")


@dataclass(frozen=True)
class HealthReport:
    """Liveness of the edge and the serving state of each gRPC dependency."""

    #: service name → "SERVING", "NOT_SERVING", "UNKNOWN" or "UNREACHABLE".
    services: Mapping[str, str]
    #: Edge workers reporting on this port (None: a lone edge).
    workers: int | None = None
    #: The session store when it is not persistent (``{"persistent": false, "reason"}``).
    store: Mapping[str, object] | None = None
    #: The edge workers of this host that do not serve (yet): 503 until each does.
    waiting_for: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        """True when every dependency reports SERVING and every edge worker serves."""
        return not self.waiting_for and all(
            state == "SERVING" for state in self.services.values())

    @property
    def status_code(self) -> int:
        """200 when healthy, else 503 (load balancers and compose read the code)."""
        return 200 if self.healthy else 503

    def body(self) -> str:
        """``{"status": "ok"|"degraded", "edge": "SERVING", "services": {...}}`` (and
        ``"workers": N`` with several edge workers: those serving, and ``"waiting_for"``
        naming the others, e.g. ``["edge worker 2"]``). A store in memory is degraded too,
        with ``"store": {"persistent": false, "reason": …}``, though the status code stays
        200: restarting would not bring the store back, and sessions are still served."""
        body: dict[str, object] = {
            "status": "ok" if self.healthy and self.store is None else "degraded",
            "edge": "SERVING",
            "services": dict(self.services),
        }
        if self.workers is not None:
            body["workers"] = self.workers
        if self.waiting_for:
            body["waiting_for"] = [f"edge worker {n}" for n in self.waiting_for]
        if self.store is not None:
            body["store"] = dict(self.store)
        return orjson.dumps(body).decode() + "\n"


@dataclass(frozen=True)
class GatewayGauges:
    """Values the gateway itself knows (its WebSocket and Streamable HTTP sides)."""

    connections: int = 0
    connections_total: int = 0
    rejected_unauthorized_total: int = 0
    #: Handshakes refused for a connection limit, by reason (``services.edge.transport.admission``).
    rejected_busy: Mapping[str, int] = field(default_factory=dict)
    slow_client_closes_total: int = 0
    revoked_closes_total: int = 0
    #: lease state → count; ``None`` when the lifecycle service could not be asked.
    leases: Mapping[str, int] | None = None
    #: service name → 1 serving / 0 not.
    services_up: Mapping[str, int] = field(default_factory=dict)
    #: Streamable HTTP (ACP remote transport): connections, streams, closes.
    http_connections: int = 0
    http_connections_total: int = 0
    http_slow_client_closes_total: int = 0
    sse_streams: int = 0
    #: Open client connections (WebSocket and Streamable HTTP) by edge worker (several
    #: workers only; the host's view, filled in after the workers' tables are summed).
    worker_connections: Mapping[int, int] = field(default_factory=dict)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _escape(label: str) -> str:
    return label.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_text: str,
               samples: list[tuple[Mapping[str, str], float]]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            if labels:
                rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                self.lines.append(f"{name}{{{rendered}}} {_fmt(value)}")
            else:
                self.lines.append(f"{name} {_fmt(value)}")


def render_metrics(metrics: Metrics, gauges: GatewayGauges) -> str:
    """The Prometheus text for ``/metrics``: the runtime's counters plus gateway gauges."""
    w = _Writer()
    w.metric("acpgate_active_sessions", "gauge", "Sessions currently active on this edge.",
             [({}, float(metrics.active_sessions))])
    w.metric("acpgate_turns_total", "counter", "Prompt turns completed.",
             [({}, float(metrics.turns_total))])
    w.metric("acpgate_relayed_updates_total", "counter",
             "session/update notifications relayed to clients.",
             [({}, float(metrics.relayed_updates_total))])
    w.metric("acpgate_replay_ring_chars", "gauge",
             "What the replay rings of every live session cost together, and their budget.",
             [({"of": "held"}, float(metrics.replay_ring_chars)),
              ({"of": "budget"}, float(metrics.replay_budget_chars))])
    w.metric("acpgate_replay_trimmed_chars_total", "counter",
             "What the replay budget's trims dropped from the rings (oldest events first).",
             [({}, float(metrics.replay_trimmed_chars_total))])
    w.metric("acpgate_permission_requests_total", "counter",
             "Permission requests re-issued to clients.",
             [({}, float(metrics.permission_requests_total))])
    w.metric("acpgate_tokens_total", "counter",
             "Tokens of stored turns as the agents reported them, by kind.",
             [({"kind": "input"}, float(metrics.input_tokens_total)),
              ({"kind": "output"}, float(metrics.output_tokens_total))])
    w.metric("acpgate_errors_total", "counter", "JSON-RPC errors answered, by code.",
             [({"code": str(code)}, float(n)) for code, n in sorted(metrics.errors_total.items())])
    if gauges.leases is not None:
        states = {s: 0 for s in LEASE_STATES}
        states.update(gauges.leases)
        w.metric("acpgate_leases", "gauge", "Adapter process leases by state.",
                 [({"state": s}, float(n)) for s, n in states.items()])
    w.metric("acpgate_ws_connections", "gauge", "Open WebSocket connections.",
             [({}, float(gauges.connections))])
    w.metric("acpgate_ws_connections_total", "counter", "WebSocket connections accepted.",
             [({}, float(gauges.connections_total))])
    w.metric("acpgate_ws_rejected_total", "counter",
             "Handshakes and new Streamable HTTP connections refused, by reason.",
             [({"reason": "unauthorized"}, float(gauges.rejected_unauthorized_total)),
              *(({"reason": r}, float(n)) for r, n in sorted(gauges.rejected_busy.items()))])
    w.metric("acpgate_ws_slow_client_closes_total", "counter",
             "Connections closed because the client did not read its frames.",
             [({}, float(gauges.slow_client_closes_total))])
    w.metric("acpgate_ws_revoked_closes_total", "counter",
             "Connections closed because their token was revoked.",
             [({}, float(gauges.revoked_closes_total))])
    w.metric("acpgate_http_connections", "gauge", "Open Streamable HTTP connections.",
             [({}, float(gauges.http_connections))])
    w.metric("acpgate_http_connections_total", "counter",
             "Streamable HTTP connections opened (initialize).",
             [({}, float(gauges.http_connections_total))])
    w.metric("acpgate_http_slow_client_closes_total", "counter",
             "Streamable HTTP connections closed because the client read none of its streams.",
             [({}, float(gauges.http_slow_client_closes_total))])
    w.metric("acpgate_sse_streams", "gauge", "Open SSE streams (GET /acp).",
             [({}, float(gauges.sse_streams))])
    if gauges.worker_connections:
        w.metric("acpgate_worker_connections", "gauge",
                 "Open client connections (WebSocket and Streamable HTTP) each edge worker holds.",
                 [({"worker": str(n)}, float(c)) for n, c in sorted(gauges.worker_connections.items())])
    w.metric("acpgate_service_up", "gauge", "gRPC dependency health (1 = SERVING).",
             [({"service": name}, float(up)) for name, up in sorted(gauges.services_up.items())])
    return "\n".join(w.lines) + "\n"
