"""The global connection limit and each token's share of it."""

from __future__ import annotations

from services.common.config import GatewaySection
from services.edge.transport.admission import (
    TOO_MANY,
    TOO_MANY_FOR_TOKEN,
    LiveConnections,
    token_share,
)


def test_default_share_is_a_quarter_of_the_limit() -> None:
    assert token_share(GatewaySection()) == 16
    assert token_share(GatewaySection(max_connections=8)) == 2
    assert token_share(GatewaySection(max_connections=2)) == 1
    assert token_share(GatewaySection(max_connections=8, max_connections_per_token=5)) == 5


def test_a_token_over_its_share_is_refused_others_are_not() -> None:
    live: LiveConnections[str] = LiveConnections(max_connections=4, per_token=2)
    live.add("a1", "A")
    live.add("a2", "A")
    refusal = live.refusal("A")
    assert refusal is not None and refusal.reason == TOO_MANY_FOR_TOKEN
    assert refusal.body == "Too many connections for this token (limit 2)\n"
    assert live.refusal("B") is None and live.refusal("") is None
    live.add("b1", "B")
    live.add("op", "")  # no token (require_auth off): counts against the global limit only
    refusal = live.refusal("B")
    assert refusal is not None and (refusal.reason, refusal.limit) == (TOO_MANY, 4)
    assert live.rejected == {TOO_MANY: 1, TOO_MANY_FOR_TOKEN: 1}
    assert live.token_ids() == {"A", "B"} and sorted(live.of_tokens({"A"})) == ["a1", "a2"]
    live.discard("a1")
    live.discard("a1")  # twice is harmless
    live.discard("op")
    assert live.refusal("A") is None and len(live) == 2
    live.discard("a2")
    assert live.token_ids() == {"B"}
