"""The v2 relay against the v1 relay only: ``acpgate acp`` with a v1 client and with a v2
client (every update translated), both on the firehose agent (bench/PROFILE.md).

``python -m bench.v2_pair [--rounds N] [--counts 2000,20000]`` prints a table.

The ``relay`` group of ``python -m bench`` measures this pair among five other paths and
an ``acpgate serve``; this runs only the pair, in interleaved rounds (v1, v2, then v2, v1 …)
so the shared machine's load hits both alike. Besides updates/s (the ``relay`` row's
figure: from the prompt to the last update) it reports the rate to the turn's end (v1's
prompt answer, v2's idle ``state_update``: both after the turn is stored), the CPU µs per
update of each ``acpgate acp`` process (the run time of all its threads around the
round, the steadier figure on a shared machine) and the v2/v1 ratios of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from bench.relay import open_session, throughput_round
from bench.stage import stage

VERSIONS = (1, 2)


def _cpu(proc: psutil.Process) -> float:
    """CPU seconds of all of ``proc``'s threads: their run time in nanoseconds from
    ``/proc/<pid>/task/*/schedstat`` where Linux has it (psutil's ``cpu_times`` ticks in
    10 ms, a fifth of a 2,000-update prompt), else psutil's."""
    total = 0
    try:
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[0])
    except OSError:
        t = proc.cpu_times()
        return float(t.user + t.system)
    return total / 1e9


async def run(counts: Sequence[int], rounds: int) -> str:
    """Measure the pair; returns the table (markdown)."""
    rates: dict[tuple[int, int], list[float]] = {(v, n): [] for v in VERSIONS for n in counts}
    cpus: dict[tuple[int, int], list[float]] = {(v, n): [] for v in VERSIONS for n in counts}
    whole: dict[tuple[int, int], list[float]] = {(v, n): [] for v in VERSIONS for n in counts}
    async with stage() as st:
        endpoints = {v: await st.acp() for v in VERSIONS}
        try:
            procs = {}
            sids = {}
            for v, ep in endpoints.items():
                assert ep.proc is not None
                procs[v] = psutil.Process(ep.proc.pid)
                sids[v] = await open_session(ep, st.workspace, v)
                await throughput_round(ep.peer, sids[v], 1000)  # warm-up
            for r in range(rounds):
                for n in counts:
                    # v1 first in even rounds, v2 first in odd ones: the first of a pair
                    # after a long turn measured costlier, whichever it was.
                    for v in VERSIONS if r % 2 == 0 else VERSIONS[::-1]:
                        ep = endpoints[v]
                        before = await asyncio.to_thread(_cpu, procs[v])
                        t0 = time.monotonic()
                        rates[v, n].append(await throughput_round(ep.peer, sids[v], n))
                        whole[v, n].append(n / (time.monotonic() - t0))
                        used = await asyncio.to_thread(_cpu, procs[v]) - before
                        cpus[v, n].append(used / n * 1e6)
        finally:
            for ep in endpoints.values():
                await ep.close()
    out = ["| updates/prompt | v1 updates/s | v2 updates/s | v2/v1 rate | v2/v1 rate to the "
           "turn's end | v1 µs/update | v2 µs/update | v2/v1 CPU |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in counts:
        r1, r2 = (statistics.median(rates[v, n]) for v in VERSIONS)
        w1, w2 = (statistics.median(whole[v, n]) for v in VERSIONS)
        c1, c2 = (statistics.median(cpus[v, n]) for v in VERSIONS)
        out.append(f"| {n:,} | {r1:,.0f} | {r2:,.0f} | {r2 / r1:.2f}× | {w2 / w1:.2f}× "
                   f"| {c1:.2f} | {c2:.2f} | {c2 / c1:.2f}× |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, run, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.v2_pair", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--counts", default="2000,20000",
                        help="comma-separated updates per prompt (default 2000,20000)")
    args = parser.parse_args(argv)
    try:
        counts = [int(x) for x in args.counts.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--counts wants comma-separated numbers, not {args.counts!r}")
    if not counts or min(counts) < 1 or args.rounds < 1:
        parser.error("--counts wants counts of at least 1, --rounds at least 1")
    print(asyncio.run(run(counts, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
