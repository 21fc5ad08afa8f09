"""Summaries of samples and the rows of the results table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between closest ranks."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (pos - low))


@dataclass(frozen=True)
class Dist:
    """Median and p99 of ``n`` samples.

    For rates (higher is better) ``p99`` is the *low* tail (the 1st percentile),
    so that p99 is always the bad end of the distribution.
    """

    median: float
    p99: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float], *, higher_is_better: bool = False) -> Dist:
        """Summarise ``samples``."""
        tail = percentile(samples, 1.0 if higher_is_better else 99.0)
        return cls(statistics.median(samples) if samples else math.nan, tail, len(samples))


@dataclass(frozen=True)
class Row:
    """One measured figure next to its baseline from the same run."""

    item: str
    measure: str
    unit: str
    value: Dist
    baseline_label: str
    baseline: Dist | None
    target: str = ""
    #: True / False when a target applies, None otherwise.
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """``value.median / baseline.median`` (None without a baseline)."""
        if self.baseline is None or not self.baseline.median:
            return None
        return self.value.median / self.baseline.median


def fmt(x: float) -> str:
    """A number with sensible precision for the table."""
    if math.isnan(x):
        return "n/a"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"
