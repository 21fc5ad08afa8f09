"""Counters and gauges of one edge, rendered by the gateway at ``/metrics``
(``services.edge.transport.http.render_metrics``)."""

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
    #: Tokens of the stored turns, as the adapters reported them (prompt result ``usage``).
    input_tokens_total: int = 0
    output_tokens_total: int = 0
    #: Gauge: what every session's replay ring costs now, and the budget; counter: what the
    #: budget's trims dropped (services.edge.sessions.ring_budget).
    replay_ring_chars: int = 0
    replay_budget_chars: int = 0
    replay_trimmed_chars_total: int = 0

    def count_tokens(self, input_tokens: int, output_tokens: int) -> None:
        """Add one stored turn's token usage."""
        self.input_tokens_total += input_tokens
        self.output_tokens_total += output_tokens

    def count_error(self, code: int) -> None:
        """Count one error response with ``code``."""
        self.errors_total[code] = self.errors_total.get(code, 0) + 1
