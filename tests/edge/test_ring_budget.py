"""One budget for every session's replay ring (``services.edge.sessions.ring_budget``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.config import ConfigError, load_config
from services.edge.sessions.feed import SessionFeed
from services.edge.sessions.ring_budget import EVENT_OVERHEAD, RingBudget, fair_level


def _feeds(budget: RingBudget, count: int, principal: str = "p") -> list[SessionFeed]:
    return [SessionFeed(f"s{i}", max_chars=1 << 20, start_id=1, budget=budget,
                        principal=principal) for i in range(count)]


def _held(feeds: list[SessionFeed]) -> int:
    return sum(f.cost for f in feeds)


def test_fair_level_is_max_min() -> None:
    assert fair_level([10, 10, 10], 30) == 10  # everything fits
    assert fair_level([1, 100, 100], 41) == 20  # the small one keeps all it has
    assert fair_level([5, 5], 3) == 1
    assert fair_level([], 10) == 0


def test_many_sessions_rings_together_never_pass_the_budget() -> None:
    budget = RingBudget(40_000)
    feeds = _feeds(budget, 30)
    for step in range(400):
        for n, feed in enumerate(feeds):
            feed.stamp([f"{step}-{'x' * (n * 7 % 90)}"], None)
            assert budget.total == _held(feeds) <= budget.limit
    assert budget.trims > 0 and budget.metrics.replay_trimmed_chars_total > 0
    # Each ring still holds its newest events, every session about the same share.
    costs = [f.cost for f in feeds]
    assert min(costs) > 0 and max(costs) <= 2 * budget.limit // len(feeds)


def test_a_point_the_budget_evicted_is_not_replayed_the_rest_exactly() -> None:
    budget = RingBudget(20_000)
    feed, other = _feeds(budget, 2)
    first = feed.stamp(["first"], None)[0]
    for i in range(200):
        other.stamp([f"filler {i} " + "y" * 100], None)
        feed.stamp([f"chunk {i}"], None)
    assert feed.evicted > 0
    assert feed.after(first.event_id) is None  # fell out: the caller falls back
    assert feed.after_message("no such message") is None
    held = feed.held()
    assert feed.after(held[0].event_id - 1) == held  # what it holds it gives exactly
    assert [e.event_id for e in held] == list(range(held[0].event_id, feed.last_id + 1))


def test_one_principals_flood_trims_its_own_rings_first() -> None:
    budget = RingBudget(50_000)
    quiet = _feeds(budget, 1, "quiet")[0]
    kept = quiet.stamp([f"q{i}" for i in range(20)], None)
    flood = _feeds(budget, 8, "flood")
    for i in range(2_000):
        flood[i % 8].stamp(["z" * 200], None)
    assert quiet.evicted == 0 and quiet.after(kept[0].event_id - 1) == kept
    assert budget.total <= budget.limit
    # A second principal that holds as much as its fair level is trimmed to it, no further.
    big = _feeds(budget, 1, "big")[0]
    for _ in range(1_000):
        big.stamp(["b" * 100], None)
        flood[0].stamp(["z" * 200], None)
    assert quiet.evicted == 0
    assert big.cost >= sum(f.cost for f in flood) - 2 * (300 + EVENT_OVERHEAD)


def test_a_closed_ring_no_longer_counts() -> None:
    budget = RingBudget(1 << 20)
    feed, other = _feeds(budget, 2)
    feed.stamp(["a" * 1000, "b"], None)
    other.stamp(["c"], None)
    assert budget.total == feed.cost + other.cost
    assert feed.cost == sum(len(e.line) + EVENT_OVERHEAD for e in feed.held())
    feed.close()
    feed.stamp(["late"], None)  # after its session ended: counted nowhere
    assert budget.total == other.cost


def test_the_budget_is_validated(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[gateway]\nreplay_budget_chars = 0\n")
    with pytest.raises(ConfigError, match="replay_budget_chars"):
        load_config(tmp_path, environ={})
    (tmp_path / "config.toml").write_text("[gateway]\nreplay_budget_chars = 1048576\n")
    assert load_config(tmp_path, environ={}).gateway.replay_budget_chars == 1 << 20
