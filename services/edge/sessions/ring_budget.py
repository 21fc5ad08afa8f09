"""One memory budget for the replay rings of every live session of an edge process.

Each session's :class:`~services.edge.sessions.feed.SessionFeed` keeps its newest
events for an exact replay, at most ``[gateway] replay_chars`` of them. Their sum is
bounded here too (``[gateway] replay_budget_chars``, split evenly between the edge
workers of ``acpgate serve``): the rings are a cache, and a client that stops
reading, or a session nobody attached, can never grow the edge past it.

An event costs its line's characters plus :data:`EVENT_OVERHEAD` (the objects that
hold it: about what CPython spends besides the text). When the rings together pass
the budget, they are trimmed to :data:`LOW_WATER` of it at once (so a trim runs once
per eighth of the budget streamed, not at every update), by max-min fairness:

1. between principals (the tokens the sessions belong to): each keeps what it holds,
   up to a common level chosen so that the kept total is the target — a principal
   streaming a flood is trimmed first and alone, down to the level of the others,
   never below theirs;
2. within a principal, the same between its sessions.

A ring always loses its *oldest* events: what a replay can no longer give from memory
(``SessionFeed.after`` answers None for it; the caller falls back).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Final, Protocol

from services.common.config.schema import GatewaySection, worker_count
from services.edge.metrics import Metrics

__all__ = ["EVENT_OVERHEAD", "LOW_WATER", "Ring", "RingBudget", "fair_level"]

#: What one kept event costs besides its line's characters (its ``Event``, the line's
#: string header, the ring's slot; measured with tracemalloc: ~150 bytes).
EVENT_OVERHEAD: Final = 160
#: A trim brings the rings down to this share of the budget.
LOW_WATER: Final = 7 / 8


class Ring(Protocol):
    """A session's ring as the budget sees it (``SessionFeed``)."""

    @property
    def principal(self) -> str:
        """Whose session it is."""

    @property
    def cost(self) -> int:
        """What its events cost now."""

    def trim_to(self, cost: int) -> int:
        """Drop the oldest events until what is kept costs at most ``cost``; returns
        the cost dropped."""


def fair_level(sizes: Iterable[int], target: int) -> int:
    """The level ``L`` at which ``sum(min(size, L))`` is at most ``target`` and as close
    to it as whole numbers allow (max-min fairness); the largest size when they all fit."""
    ordered = sorted(sizes)
    remaining = max(0, target)
    for index, size in enumerate(ordered):
        left = len(ordered) - index
        if size * left > remaining:
            return remaining // left
        remaining -= size
    return ordered[-1] if ordered else 0


class RingBudget:
    """The rings of one edge process and what they cost together (module doc)."""

    def __init__(self, limit: int, metrics: Metrics | None = None) -> None:
        self.limit = max(1, limit)
        #: Where the figures are kept: what every ring costs now together
        #: (``replay_ring_chars``), the limit, what the trims dropped (``/metrics``).
        self.metrics = metrics if metrics is not None else Metrics()
        self.metrics.replay_budget_chars = self.limit
        #: Trims run.
        self.trims = 0
        self._rings: dict[Ring, None] = {}

    @property
    def total(self) -> int:
        """What every ring's events cost now, together."""
        return self.metrics.replay_ring_chars

    @classmethod
    def of_edge(cls, gateway: GatewaySection, worker: int, metrics: Metrics) -> RingBudget:
        """The budget of one edge process: ``[gateway] replay_budget_chars``, split evenly
        between the workers of ``acpgate serve`` (``worker`` 0: the only edge)."""
        workers = worker_count(gateway.workers, os.cpu_count()) if worker else 1
        return cls(gateway.replay_budget_chars // max(1, workers), metrics)

    def join(self, ring: Ring) -> None:
        """Count ``ring`` (at its first event; again after a trim emptied it: the same)."""
        self._rings[ring] = None

    def leave(self, ring: Ring) -> None:
        """``ring`` is gone (its session ended): what it held no longer counts."""
        if self._rings.pop(ring, 0) is None:
            self.metrics.replay_ring_chars -= ring.cost

    def trim(self) -> None:
        """Bring the rings down to :data:`LOW_WATER` of the budget, fairly (module doc)."""
        self.trims += 1
        target = int(self.limit * LOW_WATER)
        by_principal: dict[str, list[Ring]] = defaultdict(list)
        for ring in self._rings:
            by_principal[ring.principal].append(ring)
        held = {p: sum(r.cost for r in rings) for p, rings in by_principal.items()}
        level = fair_level(held.values(), target)
        for principal, rings in by_principal.items():
            if held[principal] <= level:
                continue
            share = fair_level((r.cost for r in rings), level)
            for ring in rings:
                if ring.cost > share:
                    dropped = ring.trim_to(share)
                    self.metrics.replay_ring_chars -= dropped
                    self.metrics.replay_trimmed_chars_total += dropped
