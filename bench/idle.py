"""What an idle ``acpgate acp`` costs: CPU and wake-ups with no session, and per idle session.

``acpgate acp`` (the process an editor keeps open all day) is started, initialized,
and left alone; its whole process tree (acpgate itself, the wrappers and the adapters
of the firehose agent, which sleeps until prompted) is metered over a few windows:
CPU time (``/proc/<pid>/task/*/schedstat``) and wake-ups (voluntary context switches of every
thread, from ``/proc``). Then N sessions are opened and left idle (no turn running),
and the same is metered again; the slope (the difference over N) is what one idle
session costs. Nothing is prompted: every cost measured is a timer, a poll or a
heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob

import psutil

from bench.relay import initialize, new_session
from bench.stage import Stage
from bench.stats import Dist, Row

#: Seconds the tree settles after a change (sessions opened) before it is metered (at most
#: one window).
SETTLE_SECS = 2.0


def _threads(pid: int) -> tuple[float, int]:
    """CPU seconds (``schedstat``: nanoseconds, where ``cpu_times`` counts 10 ms ticks)
    and wake-ups (voluntary context switches) of every thread of ``pid``."""
    cpu_ns = wakes = 0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"{task}/schedstat", encoding="ascii") as fh:
                cpu_ns += int(fh.read().split()[0])
            with open(f"{task}/status", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("voluntary_ctxt_switches"):
                        wakes += int(line.split()[1])
    return cpu_ns / 1e9, wakes


def _tree(pid: int) -> dict[int, tuple[float, int]]:
    """CPU seconds and wake-ups of ``pid`` and every descendant, by pid."""
    out: dict[int, tuple[float, int]] = {}
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            out[proc.pid] = _threads(proc.pid)
    return out


async def _meter(pid: int, secs: float) -> tuple[float, float]:
    """CPU ms/s and wake-ups/s of the tree over ``secs`` (processes present at both ends)."""
    before = await asyncio.to_thread(_tree, pid)
    await asyncio.sleep(secs)
    after = await asyncio.to_thread(_tree, pid)
    cpu = sum(after[p][0] - before[p][0] for p in after if p in before)
    wakes = sum(after[p][1] - before[p][1] for p in after if p in before)
    return cpu * 1000.0 / secs, wakes / secs


async def _windows(pid: int, windows: int, secs: float) -> tuple[list[float], list[float]]:
    cpu: list[float] = []
    wakes: list[float] = []
    for _ in range(windows):
        c, w = await _meter(pid, secs)
        cpu.append(c)
        wakes.append(w)
    return cpu, wakes


async def run_idle(st: Stage, sessions: int, windows: int, secs: float) -> list[Row]:
    """The idle rows: the tree with no session, and the slope per idle session."""
    ep = await st.acp()
    try:
        assert ep.proc is not None
        await initialize(ep.peer)
        await asyncio.sleep(min(SETTLE_SECS, secs))
        cpu0, wake0 = await _windows(ep.proc.pid, windows, secs)
        for _ in range(sessions):
            await new_session(ep.peer, st.workspace)
        await asyncio.sleep(min(SETTLE_SECS, secs))
        cpu_n, wake_n = await _windows(ep.proc.pid, windows, secs)
    finally:
        await ep.close()
    base, base_w = Dist.of(cpu0), Dist.of(wake0)
    per = Dist.of([(c - b) / sessions for c, b in zip(cpu_n, cpu0, strict=True)])
    per_w = Dist.of([(w - b) / sessions for w, b in zip(wake_n, wake0, strict=True)])
    window = f"{windows} windows of {secs:g} s"
    return [
        Row("idle", "CPU of an idle `acpgate acp` (its whole process tree), no session",
            "ms/s", base, "", None, "≤ 2 ms/s", base.median <= 2.0,
            f"{base_w.median:.1f} wake-ups/s; {window}"),
        Row("idle", f"CPU per idle session ({sessions} sessions open, no turn; the slope "
            "over no session)", "ms/s", per, "", None, "≤ 0.02 ms/s", per.median <= 0.02,
            f"{per_w.median:.2f} wake-ups/s per session; tree with them "
            f"{Dist.of(cpu_n).median:.2f} ms/s, {Dist.of(wake_n).median:.1f} wake-ups/s; "
            f"{window}"),
    ]
