"""The real process table: birth identity, identity-checked signals, environment."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from services.lifecycle.proctable import PsutilProcessTable
from tests.lifecycle.conftest import ProcessGuard, Scripts, wait_until


async def test_identity_checked_signals(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    marker = tmp_path / "signals.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(scripts.unrelated), str(marker), env={**os.environ, "PROBE": "yes"}
    )
    guard.track(proc.pid)
    await wait_until(lambda: Path(str(marker) + ".ready").exists(), 10.0, "ready")
    table = PsutilProcessTable()
    info = await table.get(proc.pid)
    assert info is not None and info.ppid == os.getpid() and not info.zombie
    assert info.cmdline == (sys.executable, str(scripts.unrelated), str(marker))
    again = await table.get(proc.pid)
    assert again is not None and again.start_time == info.start_time  # stable birth identity

    # A signal addressed to another birth of the same PID is never delivered.
    assert not await table.signal(proc.pid, info.start_time + 1, signal.SIGUSR1)
    assert not await table.signal(1, 0, signal.SIGTERM)
    assert not await table.signal(0, 0, signal.SIGTERM)
    assert not marker.exists()
    assert await table.signal(proc.pid, info.start_time, signal.SIGUSR1)
    await wait_until(lambda: marker.exists() and marker.read_text().split() == [str(int(signal.SIGUSR1))], 5.0, "USR1")

    env = await table.environ(proc.pid, info.start_time)
    assert env is not None and env.get("PROBE") == "yes"
    assert await table.environ(proc.pid, info.start_time + 1) is None

    listed = {p.pid: p for p in await table.list_all()}
    assert listed[proc.pid] == info
    assert os.getpid() in listed

    proc.kill()
    await proc.wait()
    assert await table.get(proc.pid) is None
    assert not await table.signal(proc.pid, info.start_time, signal.SIGKILL)
    assert await table.get(0) is None
