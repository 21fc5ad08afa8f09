"""Real processes for the security suite: found by lease, killed by identity, never guessed.

Every helper here reads what the system itself recorded (the lease store, the
kernel's ``/proc``) to find a process, and signals only through the
identity-checked :class:`~services.lifecycle.processes.table.PsutilProcessTable`, so a
test can never hit a process it did not cause to exist.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.lifecycle.processes.table import PsutilProcessTable
from services.lifecycle.processes.verify import INSTANCE_ENV, LEASE_ENV
from tests.launches import KeySource, ensure_request
from tests.lifecycle.conftest import ProcessGuard, read_pidfile

LEASES_DB = Path("data") / "lifecycle" / "leases.db"

# argv: pidfile [childpidfile] — a grandchild that survives SIGTERM (and records every
# catchable signal in <pidfile>.signals); with a second argument it first starts one
# more of itself as its own child. Writes its PID, then sleeps.
STUBBORN = r"""
import os, signal, subprocess, sys, time
record = sys.argv[1] + ".signals"
def note(signum, frame):
    with open(record, "a") as fh:
        fh.write(f"{signum}\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, note)
if len(sys.argv) > 2:
    subprocess.Popen([sys.executable, sys.argv[0], sys.argv[2]])
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""

# argv: pidfile stubborn.py — an adapter that survives SIGTERM (its parent-death signal
# too; it records every catchable signal in <pidfile>.signals) and, like a hostile
# shell, detaches a grandchild with setsid from a shell that exits at once: the
# grandchild is adopted by the wrapper (a subreaper) and lands on PID 1 without it.
DETACHER = r"""
import json, os, signal, subprocess, sys, time
pidfile, stubborn = sys.argv[1], sys.argv[2]
def note(signum, frame):
    with open(pidfile + ".signals", "a") as fh:
        fh.write(f"{signum}\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, note)
grandfile = pidfile + ".grandchild"
subprocess.run(["/bin/sh", "-c", 'setsid "$0" "$1" "$2" >/dev/null 2>&1 </dev/null &',
                sys.executable, stubborn, grandfile], check=True)
while not os.path.exists(grandfile):
    time.sleep(0.02)
with open(pidfile + ".tmp", "w") as fh:
    json.dump({"adapter": os.getpid(), "grandchild": int(open(grandfile).read())}, fh)
os.replace(pidfile + ".tmp", pidfile)
for line in sys.stdin:
    sys.stdout.write(line)
    sys.stdout.flush()
while True:
    time.sleep(1)
"""


@pytest.fixture
def guard() -> Iterator[ProcessGuard]:
    """Kills at teardown whatever the test caused to exist and is still there."""
    g = ProcessGuard()
    yield g
    g.cleanup()


def script(directory: Path, name: str, text: str) -> Path:
    """Write an adapter stand-in into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class DetachedTree:
    """A lease running :data:`DETACHER`, and where its processes record signals."""

    lease: pb.Lease
    wrapper: psutil.Process
    adapter: psutil.Process
    grandchild: psutil.Process
    pidfile: Path

    @property
    def processes(self) -> tuple[psutil.Process, ...]:
        """Wrapper, adapter, detached grandchild."""
        return (self.wrapper, self.adapter, self.grandchild)

    def signals(self) -> str:
        """The catchable signals adapter and grandchild received ("" when none)."""
        text = ""
        for path in (Path(f"{self.pidfile}.signals"), Path(f"{self.pidfile}.grandchild.signals")):
            text += path.read_text() if path.exists() else ""
        return text


async def ensure_detacher(
    stub: lifecycle_pb2_grpc.LifecycleServiceStub, workdir: Path, guard: ProcessGuard,
    session_key: str = "agent:d:acp:1", *, install: KeySource | None = None,
) -> DetachedTree:
    """Spawn :data:`DETACHER` through ``stub`` (its spec sealed with ``install``'s key, default
    the tests' key); returns once the wrapper adopted the grandchild."""
    stubborn = script(workdir, "stubborn", STUBBORN)
    detacher = script(workdir, "detacher", DETACHER)
    pidfile = workdir / "pids.json"
    resp = await stub.EnsureSession(ensure_request(
        install, session_key=session_key, command=sys.executable,
        args=[str(detacher), str(pidfile), str(stubborn)]))
    wrapper = guard.track(resp.lease.root_pid)
    pids = await read_pidfile(pidfile)
    adapter, grandchild = guard.track(pids["adapter"]), guard.track(pids["grandchild"])
    assert resp.lease.adapter_pid == adapter.pid
    # Detached: its own session, no longer the adapter's child, adopted by the wrapper.
    assert os.getsid(grandchild.pid) == grandchild.pid
    await eventually(lambda: grandchild.ppid() == wrapper.pid, 5.0, "the wrapper to adopt the grandchild")
    return DetachedTree(resp.lease, wrapper, adapter, grandchild, pidfile)


@dataclass(frozen=True)
class LeaseRow:
    """The columns of a lease the security tests look at."""

    lease_id: str
    gateway_instance_id: str
    session_key: str
    state: str
    root_pid: int
    root_start_time: int
    adapter_pid: int


def read_leases(leases_db: Path) -> list[LeaseRow]:
    """Every lease in ``leases_db``, oldest first (read-only: the service owns the file)."""
    with sqlite3.connect(f"file:{leases_db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT lease_id, gateway_instance_id, session_key, state, root_pid,"
            " root_start_time, adapter_pid FROM leases ORDER BY started_at, lease_id"
        ).fetchall()
    return [LeaseRow(*row) for row in rows]


def lease_of(leases_db: Path, session_key: str) -> LeaseRow:
    """The newest lease of ``session_key``."""
    rows = [r for r in read_leases(leases_db) if r.session_key == session_key]
    assert rows, f"no lease for {session_key} in {leases_db}"
    return rows[-1]


def marked_with(lease_id: str, instance_id: str = "") -> list[psutil.Process]:
    """Live processes whose environment carries ``lease_id`` (and ``instance_id``, if given).

    Processes whose environment cannot be read (other users') are skipped: they
    cannot be this test's.
    """
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if env.get(LEASE_ENV) != lease_id:
            continue
        if instance_id and env.get(INSTANCE_ENV) != instance_id:
            continue
        found.append(proc)
    return found


def install_processes(instance_id: str) -> dict[str, list[psutil.Process]]:
    """Live processes whose environment carries gateway instance ``instance_id``, by the
    lease id they carry (every agent, wrapper and descendant of that install)."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if instance_id and env.get(INSTANCE_ENV) == instance_id:
            found.setdefault(env.get(LEASE_ENV, ""), []).append(proc)
    return found


async def kill_exact(pid: int, start_time: int) -> bool:
    """SIGKILL exactly the process ``(pid, start_time)``; False when it is not there."""
    import signal

    return await PsutilProcessTable().signal(pid, start_time, signal.SIGKILL)


async def birth_of(pid: int) -> int:
    """The kernel birth identity (start time in ticks) of a live ``pid``."""
    info = await PsutilProcessTable().get(pid)
    assert info is not None, f"pid {pid} is not running"
    return info.start_time


def alive(proc: psutil.Process) -> bool:
    """True while that very process (birth identity) runs; a zombie has exited."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def eventually(pred: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``pred`` (off the loop) every 50 ms; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await asyncio.to_thread(pred):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)
