"""Real processes for the security suite: found by lease, killed by identity, never guessed.

Every helper here reads what the system itself recorded (the lease store, the
kernel's ``/proc``) to find a process, and signals only through the
identity-checked :class:`~services.lifecycle.proctable.PsutilProcessTable`, so a
test can never hit a process it did not cause to exist.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from services.lifecycle.proctable import PsutilProcessTable
from services.lifecycle.verify import INSTANCE_ENV, LEASE_ENV

LEASES_DB = Path("data") / "lifecycle" / "leases.db"


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
