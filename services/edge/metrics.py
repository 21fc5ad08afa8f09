"""Counters and gauges of one edge, rendered by the gateway at ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Metrics:
    """Process-wide edge counters (shared by every connection of one runtime).

    Plain integers mutated from the event loop only, so no locking is needed.
    """

    #: Gauge: sessions currently active (adapter attached) in this edge.
    active_sessions: int = 0
    #: Completed prompt turns (any stop reason, failed turns excluded).
    turns_total: int = 0
    #: session/update notifications relayed from adapters to clients.
    relayed_updates_total: int = 0
    #: session/request_permission (and elicitation) requests re-issued to clients.
    permission_requests_total: int = 0
    #: JSON-RPC error responses sent to clients, by error code.
    errors_total: dict[int, int] = field(default_factory=dict)

    def count_error(self, code: int) -> None:
        """Count one error response with ``code``."""
        self.errors_total[code] = self.errors_total.get(code, 0) + 1

    def render(self) -> str:
        """The counters in the Prometheus text exposition format."""
        lines = [
            "# TYPE acpgate_active_sessions gauge",
            f"acpgate_active_sessions {self.active_sessions}",
            "# TYPE acpgate_turns_total counter",
            f"acpgate_turns_total {self.turns_total}",
            "# TYPE acpgate_relayed_updates_total counter",
            f"acpgate_relayed_updates_total {self.relayed_updates_total}",
            "# TYPE acpgate_permission_requests_total counter",
            f"acpgate_permission_requests_total {self.permission_requests_total}",
            "# TYPE acpgate_errors_total counter",
        ]
        for code in sorted(self.errors_total):
            lines.append(f'acpgate_errors_total{{code="{code}"}} {self.errors_total[code]}')
        return "\n".join(lines) + "\n"
