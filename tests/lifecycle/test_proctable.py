"""The real process table: birth identity, identity-checked signals, environment."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes import table as proctable
from services.lifecycle.processes.table import ProcInfo, PsutilProcessTable
from services.lifecycle.processes.verify import REASON_UNREADABLE, Owner, command_hash
from services.lifecycle.reaping.reaper import Reaper
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


async def test_an_unreadable_root_is_listed_and_fails_closed(
    tmp_path: Path, scripts: Scripts, guard: ProcessGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "signals.txt"
    proc = await asyncio.create_subprocess_exec(sys.executable, str(scripts.unrelated), str(marker))
    guard.track(proc.pid)
    await wait_until(lambda: Path(str(marker) + ".ready").exists(), 10.0, "ready")
    table = PsutilProcessTable()
    info = await table.get(proc.pid)
    assert info is not None
    root = str(tmp_path / "wrapper")
    lease = LeaseRecord(
        lease_id="lease-u", gateway_instance_id="gw-u", session_key="agent:u:acp:1",
        wrapper_root=root, wrapper_path=f"{root}/acpgate_wrapper.py",
        command_hash=command_hash(info.cmdline), started_at=1,
        root_pid=proc.pid, root_start_time=info.start_time,
    )
    store = await LeaseStore.open(tmp_path / "leases.db")
    try:
        await store.insert(lease)
        real_read_stat = proctable._read_stat

        def denied_for_root(pid: int) -> tuple[int, int, int, str] | None:
            # /proc/<pid>/stat refused (e.g. hidepid): simulated; the process is real.
            if pid == proc.pid:
                raise PermissionError(13, f"Permission denied: /proc/{pid}/stat")
            return real_read_stat(pid)

        monkeypatch.setattr(proctable, "_read_stat", denied_for_root)
        # The listing says it exists and cannot be read; it does not leave it out.
        listed = {p.pid: p for p in await table.list_all()}
        assert listed[proc.pid] == ProcInfo.unreadable_pid(proc.pid)
        # So a close cannot conclude "root gone": nothing signalled, lease kept open.
        reaper = Reaper(store, table, Owner("gw-u", root), term_grace_ms=100)
        result = await reaper.close("lease-u")
        assert result.lease is not None and result.lease.state == LeaseState.OPEN
        assert result.unverified_reason == REASON_UNREADABLE
        monkeypatch.undo()
        again = await table.get(proc.pid)
        assert again is not None and again.start_time == info.start_time and not marker.exists()
    finally:
        await store.close()
        proc.kill()
        await proc.wait()
