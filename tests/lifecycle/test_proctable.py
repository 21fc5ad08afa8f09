"""The real process table: birth identity, identity-checked signals, environment."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("refused", ["pidfd_send_signal", "pidfd_open"])
async def test_a_refused_signal_is_reported_not_raised(
    refused: str, tmp_path: Path, scripts: Scripts, guard: ProcessGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "signals.txt"
    proc = await asyncio.create_subprocess_exec(sys.executable, str(scripts.unrelated), str(marker))
    guard.track(proc.pid)
    await wait_until(lambda: Path(str(marker) + ".ready").exists(), 10.0, "ready")
    table = PsutilProcessTable()
    info = await table.get(proc.pid)
    assert info is not None

    def deny(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    # The kernel refusing the signal (EPERM) is simulated; the process is real.
    monkeypatch.setattr(signal if refused == "pidfd_send_signal" else os, refused, deny)
    assert await table.signal(proc.pid, info.start_time, signal.SIGUSR1) is False
    monkeypatch.undo()
    still = await table.get(proc.pid)
    assert still is not None and still.start_time == info.start_time and not marker.exists()
    proc.kill()
    await proc.wait()
