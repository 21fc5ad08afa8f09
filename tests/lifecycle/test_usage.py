"""Memory and CPU of a verified process, only while it is still that process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from services.lifecycle.processes.usage import add_usage, measure

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def test_a_live_process_is_measured_and_a_reused_pid_is_not() -> None:
    pid = os.getpid()
    usage = measure(pid, start_ticks(pid))
    assert usage is not None
    rss, cpu = usage
    assert rss > 1024 * 1024 and cpu > 0
    assert measure(pid, start_ticks(pid) + 1) is None  # another birth: not the one verified
    assert measure(2**22 + 7, 1) is None  # gone
    response = pb.VerifyOwnedTreeResponse(verified=True, processes=[
        pb.OwnedProcess(pid=pid, start_time=start_ticks(pid)),
        pb.OwnedProcess(pid=pid, start_time=1)])
    add_usage(response)
    assert response.processes[0].rss_bytes > 0 and response.processes[0].cpu_seconds > 0
    assert (response.processes[1].rss_bytes, response.processes[1].cpu_seconds) == (0, 0)
