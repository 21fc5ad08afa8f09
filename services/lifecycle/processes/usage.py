"""How much memory and CPU the processes of a verified tree use (``acpgate ps``).

Read from ``/proc/<pid>/stat`` and ``statm`` for the processes a verification
just proved to be a lease's (``VerifyOwnedTree`` with ``with_usage``): each is
measured only while it is still the process that was verified — the same PID
*and* start time — so a PID reused meanwhile reports nothing rather than a
stranger's numbers. Read-only; blocking (run it off the event loop).
"""

from __future__ import annotations

import os
from pathlib import Path

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb

__all__ = ["add_usage", "measure"]

_PROC = Path("/proc")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def measure(pid: int, start_time: int, proc: Path = _PROC) -> tuple[int, float] | None:
    """``(rss bytes, cpu seconds)`` of ``pid`` while it is the process born at
    ``start_time`` (clock ticks since boot); None when it is gone or another one."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        statm = (proc / str(pid) / "statm").read_text().split()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    fields = stat[stat.rindex(")") + 2:].split()
    try:
        utime, stime, started = int(fields[11]), int(fields[12]), int(fields[19])
        rss_pages = int(statm[1])
    except (IndexError, ValueError):
        return None
    if started != start_time:
        return None
    return rss_pages * _PAGE_BYTES, (utime + stime) / _TICKS


def add_usage(response: pb.VerifyOwnedTreeResponse, proc: Path = _PROC) -> None:
    """Fill ``rss_bytes`` and ``cpu_seconds`` of every process ``response`` lists."""
    for owned in response.processes:
        usage = measure(owned.pid, owned.start_time, proc)
        if usage is not None:
            owned.rss_bytes, owned.cpu_seconds = usage
