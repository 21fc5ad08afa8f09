"""``bench/results.md``: the machine, the date and every figure with its baseline."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.stats import Row, fmt


@dataclass(frozen=True)
class Machine:
    """Where the numbers were taken."""

    cpu_model: str
    cores: int
    memory_gb: float
    python: str
    system: str
    commit: str
    load_before: tuple[float, float, float]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit(repo: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def machine(repo: Path) -> Machine:
    """Describe this machine (blocking; called before the event loop starts)."""
    return Machine(
        cpu_model=_cpu_model(),
        cores=os.cpu_count() or 0,
        memory_gb=psutil.virtual_memory().total / 1024**3,
        python=sys.version.split()[0],
        system=f"{platform.system()} {platform.release()}",
        commit=_commit(repo),
        load_before=os.getloadavg(),
    )


def _cell(row: Row, value: float | None) -> str:
    return fmt(value) if value is not None else "—"


def render(m: Machine, rows: Sequence[Row], *, started: datetime, seconds: float,
           quick: bool, incidents: Sequence[str] = (), skipped: Sequence[str] = (),
           sections: Sequence[str] = ()) -> str:
    """The whole results page; ``sections``: more lines after the notes (the capacity table)."""
    load_after = os.getloadavg()
    lines = [
        "# acpgate benchmarks",
        "",
        "Written by `make bench` (`python -m bench`). Every figure is measured side by side with",
        "its baseline in the same run; **ratio** = median / baseline median. For rates "
        "(updates/s, turns/s) the p99 column is the *slow* tail (1st percentile), so p99 is "
        "always the bad end.",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')} (run took {seconds:.0f} s"
        f"{', QUICK sizes — not representative' if quick else ''})",
        f"- machine: {m.cpu_model}, {m.cores} cores, {m.memory_gb:.1f} GiB RAM, {m.system}",
        f"- python {m.python}; commit {m.commit}",
        f"- load average before / after: {m.load_before[0]:.2f} / {load_after[0]:.2f} "
        "(the machine is shared with other engineers' test runs; 2 cores carry the client, "
        "the edge, the services and the adapters at once)",
        "",
        "| # | measure | unit | median | p99 | n | baseline | base median | base p99 | ratio "
        "| target | met |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        base = row.baseline
        ratio = row.ratio
        met = "" if row.met is None else ("**met**" if row.met else "**missed**")
        lines.append(
            f"| {row.item} | {row.measure} | {row.unit} | {fmt(row.value.median)} | "
            f"{fmt(row.value.p99)} | {row.value.n} | {row.baseline_label} | "
            f"{_cell(row, base.median if base else None)} | "
            f"{_cell(row, base.p99 if base else None)} | "
            f"{f'{ratio:.2f}×' if ratio is not None else '—'} | {row.target or '—'} | {met} |")
    lines += ["", "Notes:", ""]
    for i, row in enumerate(rows, 1):
        if row.note:
            lines.append(f"{i}. ({row.item}) {row.measure}: {row.note}")
    lines += sections
    if skipped:
        lines += ["", "Not run:", ""]
        lines += [f"- {text}" for text in skipped]
    if incidents:
        lines += ["", f"Incidents: {len(incidents)} `acpgate serve` start(s) failed and were "
                  "retried (see bench/PROFILE.md, section 7):", ""]
        for text in incidents:
            first = next((ln for ln in text.splitlines() if "fork_posix" in ln or "exit" in ln),
                         text.splitlines()[0] if text else "")
            lines.append(f"- {first.strip()[:300]}")
    lines += ["", "Where the time goes on the missed targets, and what would fix it: "
              "see `bench/PROFILE.md`.", ""]
    return "\n".join(lines)


def now_utc() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)
