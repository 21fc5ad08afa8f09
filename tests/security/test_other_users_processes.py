"""acpgate never signals a process of another user, whatever a record says about it.

A pre-lease record (``<data dir>/lifecycle/legacy/*.jsonl``) names a PID and the
exact command it ran; the lifecycle service reaps what matches. Dropped by an
attacker (or left stale, its PID now another user's), a record naming another
user's process — its command copied exactly — must not make acpgate, running as
root here, kill it: a process whose uids are not all the service's own (another
user's, or one that changed uid) is never acpgate's. The table every signal goes
through refuses it, and the legacy path leaves the record with that reason.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from pathlib import Path

import psutil
import pytest

from services.lifecycle.processes.table import PsutilProcessTable
from services.lifecycle.reaping.legacy import REASON_OTHER_USER
from tests.lifecycle.conftest import ProcessGuard, make_config
from tests.security.procs import alive, eventually, guard
from tests.security.test_legacy_records import drop, rows, service

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

NOBODY = 65534
#: Run as another user entirely / keep the real uid, change the effective one (set-uid).
AS_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
EUID_NOBODY = ("setpriv", f"--euid={NOBODY}")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.getuid() != 0, reason="starting another user's process needs root"),
]


async def sleeper(guard: ProcessGuard, seconds: int, *prefix: str) -> psutil.Process:
    """``sleep <seconds>`` (a number no other process runs), under ``prefix`` (``setpriv``
    execs it in place: same PID), once it runs ``sleep`` itself."""
    proc = await asyncio.create_subprocess_exec(
        *prefix, "sleep", str(seconds), stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
    tracked = guard.track(proc.pid)
    await eventually(lambda: tracked.cmdline() == ["sleep", str(seconds)], 10.0, "sleep to run")
    return tracked


def record(proc: psutil.Process) -> dict[str, object]:
    """A legacy record naming ``proc`` by PID and its exact command."""
    return {"pid": proc.pid, "command": shlex.join(proc.cmdline())}


async def test_a_legacy_record_never_kills_another_users_process(
        tmp_path: Path, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    theirs = await sleeper(guard, 3001, *AS_NOBODY)
    setuid = await sleeper(guard, 3002, *EUID_NOBODY)
    ours = await sleeper(guard, 3003)  # the contrast: the same record for our own process
    assert theirs.uids().real == NOBODY and setuid.uids().effective == NOBODY
    drop(cfg, "records.jsonl", record(theirs), record(setuid), record(ours))
    async with service(cfg, tmp_path / "gw.log", guard):  # healthy: the legacy reap is done
        outcome = {r.pid: (r.state, r.reason) for r in rows(cfg)}
        assert outcome == {theirs.pid: ("left", REASON_OTHER_USER),
                           setuid.pid: ("left", REASON_OTHER_USER),
                           ours.pid: ("closed", "")}
        await eventually(lambda: not alive(ours), 10.0, "our own matching process to go")
        assert alive(theirs) and alive(setuid)
    for proc in (theirs, setuid):
        proc.kill()


async def test_the_table_refuses_to_signal_another_users_process(guard: ProcessGuard) -> None:
    """Whatever verified before, every signal is checked where it is sent."""
    table = PsutilProcessTable()
    theirs = await sleeper(guard, 3004, *AS_NOBODY)
    setuid = await sleeper(guard, 3005, *EUID_NOBODY)
    for proc in (theirs, setuid):
        info = await table.get(proc.pid)
        assert info is not None
        assert not await table.runs_as_service(info)
        assert not await table.signal(info.pid, info.start_time, signal.SIGKILL)
        assert alive(proc)
        proc.kill()
    ours = await sleeper(guard, 3006)
    info = await table.get(ours.pid)
    assert info is not None and await table.runs_as_service(info)
    assert await table.signal(info.pid, info.start_time, signal.SIGKILL)
    await eventually(lambda: not alive(ours), 10.0, "our own process to go")
