"""The seed's table-driven process-lifecycle simulator (SPEC §13).

Every case builds a simulated process table (FakeProcessTable) and a lease in
a real SQLite lease store, runs closeSession or startup reaping through the
real Reaper on a virtual clock, and checks exactly which processes were
signalled, in which order, and where the lease ended up.

The several-process rows (:data:`SLOT_CASES`) hold real slot locks for the
processes that live, let a starting one take its slot and run its startup reap
(its own slot's leftovers, then the dead slots'), and check that exactly the
dead slots' trees were signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

import pytest

from services.lifecycle.adapters.spawn import WrapperPaths
from services.lifecycle.controller import LifecycleController
from services.lifecycle.leases.instance_slots import acquire_slot, slot_instance_id, try_slot
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import FAKE_SERVICE_UID, FakeProc, FakeProcessTable
from services.lifecycle.processes.verify import (
    INSTANCE_ENV,
    LEASE_ENV,
    REASON_AMBIGUOUS,
    REASON_BIRTH,
    REASON_COMMAND,
    REASON_ENV,
    REASON_EXECUTABLE,
    REASON_EXITING,
    REASON_LISTING,
    REASON_NOT_WRAPPER,
    REASON_OTHER_INSTANCE,
    REASON_PGID,
    REASON_UNREADABLE,
    REASON_WRAPPER_ROOT,
    Owner,
    command_hash,
)
from services.lifecycle.reaping.reaper import Reaper
from services.lifecycle.startup.reap import reap_at_start
from services.lifecycle.wrapper.control import (
    CLEANUP,
    OP_ADOPT,
    ROLE_SERVICE,
    SUPERVISE,
    WAIT,
    AdoptionWindow,
    Control,
    proof,
    recv_line,
    send_line,
)
from services.lifecycle.wrapper.supervisor import Terminator

INSTANCE = "gw-aaaa"
OTHER_INSTANCE = "gw-bbbb"
ROOT = "/srv/gw-a/lifecycle/wrapper"
WRAPPER = f"{ROOT}/acpgate_wrapper.py"
OTHER_ROOT = "/srv/gw-b/lifecycle/wrapper"
LEASE = "lease-1"
PY = "/usr/bin/python3"
GRACE_MS = 3000

WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID, DETACHED_PID = 4100, 4101, 4102, 4103
T_WRAPPER, T_ADAPTER, T_GRANDCHILD, T_DETACHED = 10_000, 10_005, 10_009, 10_020


def wrapper_argv(
    lease_id: str = LEASE,
    instance: str = INSTANCE,
    wrapper: str = WRAPPER,
    adapter: tuple[str, ...] = ("/opt/agents/bin/agent", "--acp"),
) -> tuple[str, ...]:
    return (
        PY, "-I", "-S", wrapper, "--lease-id", lease_id, "--instance-id", instance,
        "--parent-pid", "77", "--", *adapter,
    )


def marks(lease_id: str = LEASE, instance: str = INSTANCE) -> dict[str, str]:
    return {LEASE_ENV: lease_id, INSTANCE_ENV: instance, "PATH": "/usr/bin"}


def make_lease(argv: tuple[str, ...] | None = None, **changes: object) -> LeaseRecord:
    argv = argv if argv is not None else wrapper_argv()
    base = LeaseRecord(
        lease_id=LEASE,
        gateway_instance_id=INSTANCE,
        session_key="agent:a:acp:s1",
        wrapper_root=ROOT,
        wrapper_path=WRAPPER,
        command_hash=command_hash(argv),
        started_at=1,
        root_pid=WRAPPER_PID,
        root_start_time=T_WRAPPER,
        process_group_id=ADAPTER_PID,
        adapter_pid=ADAPTER_PID,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def wrapper_proc(**changes: object) -> FakeProc:
    base = FakeProc(WRAPPER_PID, 77, 77, T_WRAPPER, wrapper_argv(), PY, marks())
    return replace(base, **changes)  # type: ignore[arg-type]


def adapter_proc(**changes: object) -> FakeProc:
    base = FakeProc(
        ADAPTER_PID, WRAPPER_PID, ADAPTER_PID, T_ADAPTER, ("/opt/agents/bin/agent", "--acp"),
        "/opt/agents/bin/agent", marks(),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def grandchild_proc(**changes: object) -> FakeProc:
    base = FakeProc(
        GRANDCHILD_PID, ADAPTER_PID, ADAPTER_PID, T_GRANDCHILD, ("node", "tool-server.js"),
        "/usr/bin/node", marks(),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def detached_proc(**changes: object) -> FakeProc:
    """``setsid sleep 4001 &`` from the agent's shell: own session and group, on init."""
    base = FakeProc(
        DETACHED_PID, 1, DETACHED_PID, T_DETACHED, ("sleep", "4001"), "/usr/bin/sleep", marks(),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def full_tree() -> list[FakeProc]:
    return [wrapper_proc(), adapter_proc(), grandchild_proc()]


class VirtualClock:
    """Time moves only when the reaper sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        self.on_sleep: Callable[[float], None] | None = None

    def now(self) -> float:
        return self.t

    async def sleep(self, secs: float) -> None:
        self.t += max(secs, 0.001)
        if self.on_sleep is not None:
            self.on_sleep(self.t)


@dataclass
class Case:
    name: str
    procs: list[FakeProc]
    lease: LeaseRecord
    #: Signals expected, in order: (pid, signal).
    signals: list[tuple[int, int]]
    state: LeaseState
    reason: str = ""
    alive_after: set[int] = field(default_factory=set)
    gone_after: set[int] = field(default_factory=set)
    listing_available: bool = True
    startup: bool = False
    setup: Callable[[FakeProcessTable, VirtualClock], None] | None = None
    terminated: set[int] | None = None


TERM, KILL = int(signal.SIGTERM), int(signal.SIGKILL)


def untouched_detached(name: str, *, startup: bool = False, **changes: object) -> Case:
    """A dead wrapper's lease, and a detached process that does not prove it is the lease's."""
    return Case(
        name,
        procs=[detached_proc(**changes)],
        lease=make_lease(),
        signals=[],
        state=LeaseState.LOST,
        alive_after={DETACHED_PID},
        startup=startup,
    )


def _swap_root_after_term(table: FakeProcessTable, clock: VirtualClock) -> None:
    """The wrapper exits on SIGTERM and its PID is reused by an unrelated process."""

    def hook(tbl: FakeProcessTable, pid: int, sig: int) -> None:
        if pid == WRAPPER_PID and sig == TERM:
            tbl.remove(WRAPPER_PID)
            tbl.add(FakeProc(WRAPPER_PID, 1, WRAPPER_PID, T_WRAPPER + 500, ("sshd",), "/usr/sbin/sshd"))

    table.after_signal = hook


def _adapter_pid_reused_during_grace(table: FakeProcessTable, clock: VirtualClock) -> None:
    """The stubborn adapter dies on its own during the grace and an unrelated process takes its PID."""

    def on_sleep(t: float) -> None:
        if t > 1.0 and table.alive(ADAPTER_PID, T_ADAPTER):
            table.remove(ADAPTER_PID)
            table.add(FakeProc(ADAPTER_PID, 1, ADAPTER_PID, T_ADAPTER + 900, ("postgres",), "/usr/bin/postgres"))

    clock.on_sleep = on_sleep


CASES: list[Case] = [
    Case(
        "pid reused by an unrelated process",
        procs=[FakeProc(WRAPPER_PID, 1, WRAPPER_PID, T_WRAPPER + 777, ("/usr/sbin/cron", "-f"), "/usr/sbin/cron")],
        lease=make_lease(),
        signals=[],
        state=LeaseState.LOST,
        reason=REASON_BIRTH,
        alive_after={WRAPPER_PID},
    ),
    Case(
        "pid reused under another gateway's wrapper root (new birth)",
        procs=[
            wrapper_proc(
                start_time=T_WRAPPER + 3,
                cmdline=wrapper_argv("lease-9", OTHER_INSTANCE, f"{OTHER_ROOT}/acpgate_wrapper.py"),
                environ=marks("lease-9", OTHER_INSTANCE),
            ),
            adapter_proc(start_time=T_ADAPTER + 3, environ=marks("lease-9", OTHER_INSTANCE)),
        ],
        lease=make_lease(),
        signals=[],
        state=LeaseState.LOST,
        reason=REASON_BIRTH,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "pid reused under another gateway's wrapper root (same start tick)",
        procs=[
            wrapper_proc(
                cmdline=wrapper_argv("lease-9", OTHER_INSTANCE, f"{OTHER_ROOT}/acpgate_wrapper.py"),
                environ=marks("lease-9", OTHER_INSTANCE),
            ),
            adapter_proc(environ=marks("lease-9", OTHER_INSTANCE)),
        ],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_WRAPPER_ROOT,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "stored command shell-quoted, live argv not: exact argv hash still matches",
        procs=[
            wrapper_proc(cmdline=wrapper_argv(adapter=("/opt/my agents/bin/agent", "--name", "it's me"))),
            adapter_proc(cmdline=("/opt/my agents/bin/agent", "--name", "it's me")),
        ],
        lease=make_lease(wrapper_argv(adapter=("/opt/my agents/bin/agent", "--name", "it's me"))),
        signals=[(ADAPTER_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "adapter child exited, grandchild left in the group",
        procs=[wrapper_proc(), grandchild_proc(ppid=WRAPPER_PID)],
        lease=make_lease(),
        signals=[(GRANDCHILD_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, GRANDCHILD_PID},
    ),
    Case(
        "adapter exited, grandchild re-parented to init, found by group + lease env",
        procs=[wrapper_proc(), grandchild_proc(ppid=1)],
        lease=make_lease(),
        signals=[(GRANDCHILD_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, GRANDCHILD_PID},
    ),
    Case(
        "group id reused by a stranger after the adapter group emptied: stranger untouched",
        procs=[
            wrapper_proc(),
            FakeProc(5000, 1, ADAPTER_PID, T_WRAPPER + 50, ("vim",), "/usr/bin/vim", {"PATH": "/bin"}),
        ],
        lease=make_lease(),
        signals=[(WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        alive_after={5000},
    ),
    Case(
        "root exists but cannot be read: fail closed, not lost",
        procs=[wrapper_proc(unreadable=True), adapter_proc(), grandchild_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_UNREADABLE,
        alive_after={WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID},
    ),
    Case(
        "root exists but cannot be read (startup reap): fail closed, not lost",
        procs=[wrapper_proc(unreadable=True), adapter_proc(), grandchild_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_UNREADABLE,
        alive_after={WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID},
        startup=True,
    ),
    Case(
        "adapter ignores SIGTERM: grace, re-verify, SIGKILL",
        procs=[wrapper_proc(ignores_term=True), adapter_proc(ignores_term=True), grandchild_proc()],
        lease=make_lease(),
        signals=[
            (GRANDCHILD_PID, TERM), (ADAPTER_PID, TERM), (WRAPPER_PID, TERM),
            (ADAPTER_PID, KILL), (WRAPPER_PID, KILL),
        ],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID},
        terminated={WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID},
    ),
    Case(
        "root PID reused during the grace: survivor killed, the new process never",
        procs=[wrapper_proc(), adapter_proc(ignores_term=True)],
        lease=make_lease(),
        signals=[(ADAPTER_PID, TERM), (WRAPPER_PID, TERM), (ADAPTER_PID, KILL)],
        state=LeaseState.CLOSED,
        alive_after={WRAPPER_PID},
        gone_after={ADAPTER_PID},
        setup=_swap_root_after_term,
    ),
    Case(
        "survivor's PID reused during the grace: no SIGKILL to the newcomer",
        procs=[wrapper_proc(ignores_term=True), adapter_proc(ignores_term=True)],
        lease=make_lease(),
        signals=[(ADAPTER_PID, TERM), (WRAPPER_PID, TERM), (WRAPPER_PID, KILL)],
        state=LeaseState.CLOSED,
        alive_after={ADAPTER_PID},
        setup=_adapter_pid_reused_during_grace,
    ),
    Case(
        "process listing unavailable: fail closed, lease back to open",
        procs=full_tree(),
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_LISTING,
        alive_after={WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID},
        listing_available=False,
    ),
    Case(
        "stale lease with no process",
        procs=[],
        lease=make_lease(),
        signals=[],
        state=LeaseState.LOST,
    ),
    Case(
        "startup orphans: wrapper, adapter child and grandchild, children first",
        procs=[wrapper_proc(ppid=1), adapter_proc(), grandchild_proc()],
        lease=make_lease(),
        signals=[(GRANDCHILD_PID, TERM), (ADAPTER_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID},
        startup=True,
    ),
    Case(
        "birth identity mismatch with the very same wrapper argv",
        procs=[wrapper_proc(start_time=T_WRAPPER + 1)],
        lease=make_lease(),
        signals=[],
        state=LeaseState.LOST,
        reason=REASON_BIRTH,
        alive_after={WRAPPER_PID},
    ),
    Case(
        "same lease id under another instance id: not ours, untouched",
        procs=[
            wrapper_proc(cmdline=wrapper_argv(instance=OTHER_INSTANCE), environ=marks(instance=OTHER_INSTANCE)),
            adapter_proc(environ=marks(instance=OTHER_INSTANCE)),
        ],
        lease=make_lease(wrapper_argv(instance=OTHER_INSTANCE), gateway_instance_id=OTHER_INSTANCE),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_OTHER_INSTANCE,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "pending lease whose only match carries another instance id: nothing recovered",
        procs=[wrapper_proc(cmdline=wrapper_argv(instance=OTHER_INSTANCE), environ=marks(instance=OTHER_INSTANCE))],
        lease=make_lease(root_pid=0, root_start_time=0, process_group_id=None, adapter_pid=0),
        signals=[],
        state=LeaseState.LOST,
        alive_after={WRAPPER_PID},
    ),
    Case(
        "ambiguous pending lease: two live wrappers match",
        procs=[wrapper_proc(), wrapper_proc(pid=4200, start_time=T_WRAPPER + 40)],
        lease=make_lease(root_pid=0, root_start_time=0, process_group_id=None, adapter_pid=0),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_AMBIGUOUS,
        alive_after={WRAPPER_PID, 4200},
    ),
    Case(
        "pending lease recovered by exact wrapper path + lease id + instance id",
        procs=[wrapper_proc(ppid=1), adapter_proc()],
        lease=make_lease(root_pid=0, root_start_time=0, process_group_id=None, adapter_pid=0),
        signals=[(ADAPTER_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, ADAPTER_PID},
        startup=True,
    ),
    Case(
        "live command differs from the lease's hash (same birth): fail closed",
        procs=[wrapper_proc(cmdline=wrapper_argv(adapter=("other-agent",))), adapter_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_COMMAND,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "root command line unreadable (mid-exit or permission): retried, then fail closed",
        procs=[wrapper_proc(cmdline=()), adapter_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_EXITING,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "readable environment without the lease id: fail closed",
        procs=[wrapper_proc(environ={"PATH": "/bin"}), adapter_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_ENV,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "unreadable environment is not required (where readable)",
        procs=[wrapper_proc(environ=None), adapter_proc(environ=None)],
        lease=make_lease(),
        signals=[(ADAPTER_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        gone_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "adapter under the root but in another process group: fail closed",
        procs=[wrapper_proc(), adapter_proc(pgid=9999)],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_PGID,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "wrapper gone, adapter orphan proven by group + lease env: reaped children first, lease lost",
        procs=[adapter_proc(ppid=1), grandchild_proc()],
        lease=make_lease(),
        signals=[(GRANDCHILD_PID, TERM), (ADAPTER_PID, TERM)],
        state=LeaseState.LOST,
        gone_after={ADAPTER_PID, GRANDCHILD_PID},
    ),
    Case(
        "wrapper SIGKILLed: adapter and its setsid grandchild on init, found by lease env (close)",
        procs=[adapter_proc(ppid=1), detached_proc()],
        lease=make_lease(),
        signals=[(ADAPTER_PID, TERM), (DETACHED_PID, TERM)],
        state=LeaseState.LOST,
        gone_after={ADAPTER_PID, DETACHED_PID},
    ),
    Case(
        "wrapper SIGKILLed: setsid grandchild still under the adapter, children first (startup)",
        procs=[adapter_proc(ppid=1), detached_proc(ppid=ADAPTER_PID)],
        lease=make_lease(),
        signals=[(DETACHED_PID, TERM), (ADAPTER_PID, TERM)],
        state=LeaseState.LOST,
        gone_after={ADAPTER_PID, DETACHED_PID},
        startup=True,
    ),
    Case(
        "wrapper SIGKILLed, detached grandchild ignores SIGTERM: grace, re-verify, SIGKILL",
        procs=[detached_proc(ignores_term=True)],
        lease=make_lease(),
        signals=[(DETACHED_PID, TERM), (DETACHED_PID, KILL)],
        state=LeaseState.LOST,
        gone_after={DETACHED_PID},
        terminated={DETACHED_PID},
    ),
    Case(
        "wrapper's PID reused by a stranger, detached grandchild still found by lease env",
        procs=[
            FakeProc(WRAPPER_PID, 1, WRAPPER_PID, T_WRAPPER + 900, ("/usr/sbin/cron",), "/usr/sbin/cron"),
            detached_proc(),
        ],
        lease=make_lease(),
        signals=[(DETACHED_PID, TERM)],
        state=LeaseState.LOST,
        alive_after={WRAPPER_PID},
        gone_after={DETACHED_PID},
    ),
    untouched_detached(
        "detached process with the lease id but another install's instance id: never signalled",
        environ=marks(instance=OTHER_INSTANCE),
    ),
    untouched_detached(
        "detached process with the lease id and no instance id: never signalled",
        startup=True, environ={LEASE_ENV: LEASE, "PATH": "/bin"},
    ),
    untouched_detached(
        "detached process with another lease's id: never signalled",
        environ=marks(lease_id="lease-2"),
    ),
    untouched_detached(
        "detached process carrying the lease id but born before the wrapper: never signalled",
        start_time=T_WRAPPER - 1,
    ),
    untouched_detached(
        "detached process whose environment cannot be read: never signalled",
        startup=True, environ=None,
    ),
    untouched_detached(
        "detached process of a set-uid program (effective uid root) carrying the marks: never signalled",
        startup=True, uids=(FAKE_SERVICE_UID, 0),
    ),
    untouched_detached(
        "detached process of another user carrying the marks: never signalled",
        uids=(0, 0),
    ),
    untouched_detached(
        "detached process whose uid cannot be read carrying the marks: never signalled",
        startup=True, uids=None,
    ),
    Case(
        "live tree with another user's (set-uid) grandchild: the rest reaped, it never signalled",
        procs=[wrapper_proc(), adapter_proc(), grandchild_proc(uids=(FAKE_SERVICE_UID, 0))],
        lease=make_lease(),
        signals=[(ADAPTER_PID, TERM), (WRAPPER_PID, TERM)],
        state=LeaseState.CLOSED,
        alive_after={GRANDCHILD_PID},
        gone_after={WRAPPER_PID, ADAPTER_PID},
        startup=True,
    ),
    Case(
        "forged: `exec -a <wrapper path>` alias, env set, lease hash of its argv: never signalled",
        procs=[wrapper_proc(cmdline=(WRAPPER, "1000"), exe="/usr/bin/sleep"), adapter_proc()],
        lease=make_lease((WRAPPER, "1000")),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_NOT_WRAPPER,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "forged: the exact wrapper argv under a copied interpreter: never signalled",
        procs=[wrapper_proc(exe="/tmp/python-copy"), adapter_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_EXECUTABLE,
        alive_after={WRAPPER_PID, ADAPTER_PID},
        startup=True,
    ),
    Case(
        "root executable unreadable: retried, then fail closed",
        procs=[wrapper_proc(exe=""), adapter_proc()],
        lease=make_lease(),
        signals=[],
        state=LeaseState.OPEN,
        reason=REASON_EXITING,
        alive_after={WRAPPER_PID, ADAPTER_PID},
    ),
    Case(
        "wrapper gone, group member without lease env: never signalled",
        procs=[adapter_proc(ppid=1, environ={"PATH": "/bin"})],
        lease=make_lease(),
        signals=[],
        state=LeaseState.LOST,
        alive_after={ADAPTER_PID},
    ),
]


@pytest.fixture
async def store(tmp_path: Path):
    s = await LeaseStore.open(tmp_path / "leases.db")
    yield s
    await s.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_lifecycle_simulator(case: Case, store: LeaseStore) -> None:
    table = FakeProcessTable([replace(p) for p in case.procs])
    table.listing_available = case.listing_available
    clock = VirtualClock()
    if case.setup is not None:
        case.setup(table, clock)
    await store.insert(case.lease)
    reaper = Reaper(
        store, table, Owner(INSTANCE, ROOT), term_grace_ms=GRACE_MS, sleep=clock.sleep, clock=clock.now,
        wall_ms=lambda: 123_456,
    )
    if case.startup:
        results = await reaper.reap_all()
        assert len(results) == 1
        result = results[0]
    else:
        result = await reaper.close(case.lease.lease_id, "test")

    assert [(pid, sig) for pid, _, sig in table.signals] == case.signals
    stored = await store.get(case.lease.lease_id)
    assert stored is not None and stored.state == case.state
    assert result.lease is not None and result.lease.state == case.state
    if case.reason:
        assert case.reason in result.unverified_reason
    if case.state in (LeaseState.CLOSED, LeaseState.LOST):
        assert stored.ended_at == 123_456
    else:
        assert stored.ended_at == 0
    for pid in case.alive_after:
        assert pid in table.procs, f"{pid} should still be alive"
    for pid in case.gone_after:
        assert pid not in table.procs, f"{pid} should be gone"
    if case.terminated is not None:
        assert set(result.terminated_pids) == case.terminated
        assert result.surviving_pids == ()
    # Never a signal to PID 0/1 or to a birth the lease did not verify.
    assert all(pid > 1 for pid, _, _ in table.signals)


async def test_environment_scan_only_when_the_root_is_gone(store: LeaseStore) -> None:
    """A live wrapper's tree is complete by parent links (it is a subreaper): no /proc scan."""
    table = FakeProcessTable([*full_tree(), detached_proc(ppid=WRAPPER_PID)])
    await store.insert(make_lease())
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=10, sleep=clock.sleep, clock=clock.now)
    result = await reaper.close(LEASE)
    assert table.environ_scans == 0
    assert set(result.terminated_pids) == {WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID, DETACHED_PID}


async def test_startup_reap_scans_environments_once_for_all_leases(store: LeaseStore) -> None:
    """Many dead wrappers, one listing, one environment scan (not one per lease)."""
    procs: list[FakeProc] = []
    for i in range(5):
        lease_id = f"lease-{i}"
        await store.insert(make_lease(lease_id=lease_id, root_pid=6000 + 10 * i))
        procs.append(detached_proc(pid=6001 + 10 * i, environ=marks(lease_id)))
    table = FakeProcessTable(procs)
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=10, sleep=clock.sleep, clock=clock.now)
    results = await reaper.reap_all()
    assert [r.lease.state for r in results if r.lease] == [LeaseState.LOST] * 5
    assert table.signalled_pids() == {p.pid for p in procs}
    assert table.environ_scans == 1


async def test_pending_recovery_records_the_root(store: LeaseStore) -> None:
    table = FakeProcessTable([wrapper_proc(ppid=1), adapter_proc()])
    lease = make_lease(root_pid=0, root_start_time=0, process_group_id=None, adapter_pid=0)
    await store.insert(lease)
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=10, sleep=clock.sleep, clock=clock.now)
    await reaper.close(LEASE)
    stored = await store.get(LEASE)
    assert stored is not None
    assert (stored.root_pid, stored.root_start_time) == (WRAPPER_PID, T_WRAPPER)


async def test_startup_reap_walks_only_this_gateway(store: LeaseStore) -> None:
    mine = make_lease()
    theirs = make_lease(
        wrapper_argv("lease-2", OTHER_INSTANCE, f"{OTHER_ROOT}/acpgate_wrapper.py"),
        lease_id="lease-2",
        gateway_instance_id=OTHER_INSTANCE,
        wrapper_root=OTHER_ROOT,
        wrapper_path=f"{OTHER_ROOT}/acpgate_wrapper.py",
        root_pid=5100,
        root_start_time=20_000,
        process_group_id=5101,
        adapter_pid=5101,
    )
    await store.insert(mine)
    await store.insert(theirs)
    table = FakeProcessTable([
        wrapper_proc(), adapter_proc(),
        FakeProc(5100, 1, 5100, 20_000, theirs_argv := wrapper_argv("lease-2", OTHER_INSTANCE, f"{OTHER_ROOT}/acpgate_wrapper.py"), PY, marks("lease-2", OTHER_INSTANCE)),
        FakeProc(5101, 5100, 5101, 20_001, ("agent",), "agent", marks("lease-2", OTHER_INSTANCE)),
    ])
    assert theirs_argv
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=10, sleep=clock.sleep, clock=clock.now)
    results = await reaper.reap_all()
    assert [r.lease.lease_id for r in results if r.lease] == [LEASE]
    assert table.signalled_pids() == {WRAPPER_PID, ADAPTER_PID}
    other = await store.get("lease-2")
    assert other is not None and other.state == LeaseState.OPEN


# ---------------------------------------------------------------------- several processes


def slot_tree(number: int, lease_id: str = "") -> tuple[LeaseRecord, list[FakeProc]]:
    """A live wrapper + adapter of slot ``number`` (its instance id in argv and marks)."""
    iid = slot_instance_id(INSTANCE, number)
    lease_id = lease_id or f"lease-s{number}"
    pid, born = 6000 + 100 * number, 20_000 + 10 * number
    argv = wrapper_argv(lease_id, iid)
    lease = make_lease(argv, lease_id=lease_id, gateway_instance_id=iid,
                       session_key=f"agent:a:acp:s{number}", root_pid=pid, root_start_time=born,
                       process_group_id=pid + 1, adapter_pid=pid + 1)
    procs = [
        FakeProc(pid, 77, 77, born, argv, PY, marks(lease_id, iid)),
        FakeProc(pid + 1, pid, pid + 1, born + 1, ("/opt/agents/bin/agent", "--acp"),
                 "/opt/agents/bin/agent", marks(lease_id, iid)),
    ]
    return lease, procs


@dataclass(frozen=True)
class SlotCase:
    """acpgate processes on one data dir: the slots whose holder lives, the slots with a
    live tree under an open lease, the slot a starting process takes, what it reaps."""

    name: str
    live: frozenset[int]
    trees: tuple[int, ...]
    starts_on: int
    reaped: frozenset[int]


SLOT_CASES = [
    SlotCase("restart of a slot: its own leftovers reaped (rows without a slot are slot 0's)",
             frozenset(), (0,), 0, frozenset({0})),
    SlotCase("two live slots + one dead slot: the dead one's reaped, the live ones untouched",
             frozenset({0, 1}), (0, 1, 2), 2, frozenset({2})),
    SlotCase("kill -9 of one of several: the next start takes its slot and reaps exactly it",
             frozenset({0, 2}), (0, 1, 2), 1, frozenset({1})),
    SlotCase("a dead slot above the starter's: reaped as that slot, the live one between not",
             frozenset({1}), (1, 3), 0, frozenset({3})),
    SlotCase("every slot with leases is live: nothing reaped, a new slot taken",
             frozenset({0, 1, 2}), (0, 1, 2), 3, frozenset()),
    SlotCase("a live slot 0 keeps its rows without a slot",
             frozenset({0}), (0,), 1, frozenset()),
]


@pytest.mark.parametrize("case", SLOT_CASES, ids=[c.name for c in SLOT_CASES])
async def test_several_processes_on_one_data_dir(case: SlotCase, store: LeaseStore,
                                                 tmp_path: Path) -> None:
    """The startup reap of one of several lifecycle services on a data dir (slots): no
    orphan after a restart, no wrong kill — with several processes at once."""
    leases: dict[int, tuple[LeaseRecord, list[FakeProc]]] = {n: slot_tree(n) for n in case.trees}
    for lease, _ in leases.values():
        await store.insert(lease)
    table = FakeProcessTable([p for _, tree in leases.values() for p in tree])
    # The other live processes hold their slots (another open file: a conflicting lock).
    held = [await asyncio.to_thread(try_slot, tmp_path, n) for n in sorted(case.live)]
    slot = await asyncio.to_thread(acquire_slot, tmp_path)
    controller = LifecycleController(
        store=store, table=table, instance_id=slot_instance_id(INSTANCE, slot.number),
        install_id=INSTANCE, slot=slot, state_dir=tmp_path,
        wrapper=WrapperPaths(Path(ROOT), Path(WRAPPER)), term_grace_ms=10, retention_secs=3600)
    try:
        assert all(h is not None for h in held)
        await reap_at_start(controller)
        assert slot.number == case.starts_on
        # A dead slot is given back once reaped: the next starter may take it.
        for number in case.reaped - {case.starts_on}:
            again = await asyncio.to_thread(try_slot, tmp_path, number)
            assert again is not None
            again.release()
    finally:
        slot.release()
        for h in held:
            if h is not None:
                h.release()
    assert table.signalled_pids() == {p.pid for n in case.reaped for p in leases[n][1]}
    for number, (lease, tree) in leases.items():
        stored = await store.get(lease.lease_id)
        assert stored is not None
        if number in case.reaped:
            assert stored.state == LeaseState.CLOSED
        else:
            assert stored.state == LeaseState.OPEN, f"slot {number}'s lease was touched"
            assert all(p.pid in table.procs for p in tree)


async def test_a_dead_slots_stragglers_are_found_by_that_slots_marks_only(
        store: LeaseStore, tmp_path: Path) -> None:
    """Slot 1 died with its wrapper gone; two detached processes carry its lease id, one
    with slot 1's instance id, one with live slot 0's. Only slot 1's is reaped."""
    dead, _ = slot_tree(1)
    await store.insert(dead)
    born = dead.root_start_time + 5  # after the dead wrapper: it may descend from it
    ours = detached_proc(pid=7001, start_time=born,
                         environ=marks(dead.lease_id, slot_instance_id(INSTANCE, 1)))
    live_slots = detached_proc(pid=7002, start_time=born, environ=marks(dead.lease_id, INSTANCE))
    table = FakeProcessTable([ours, live_slots])
    live = await asyncio.to_thread(try_slot, tmp_path, 0)
    slot = await asyncio.to_thread(try_slot, tmp_path, 2)
    assert live is not None and slot is not None
    controller = LifecycleController(
        store=store, table=table, instance_id=slot_instance_id(INSTANCE, 2), install_id=INSTANCE,
        slot=slot, state_dir=tmp_path, wrapper=WrapperPaths(Path(ROOT), Path(WRAPPER)),
        term_grace_ms=10, retention_secs=3600)
    try:
        await reap_at_start(controller)
    finally:
        slot.release()
        live.release()
    assert table.signalled_pids() == {7001}
    stored = await store.get(dead.lease_id)
    assert stored is not None and stored.state == LeaseState.LOST


# ---------------------------------------------------------------------- parent death


class FakeGroup:
    """The wrapper's view of its adapter group over the simulated table."""

    def __init__(self, table: FakeProcessTable, pgid: int, clock: VirtualClock) -> None:
        self.table = table
        self.pgid = pgid
        self.clock = clock
        self.sent: list[int] = []

    def members(self) -> list[FakeProc]:
        return [p for p in self.table.procs.values() if p.pgid == self.pgid]

    def signal_all(self, sig: int) -> None:
        self.sent.append(sig)
        for p in self.members():
            self.table.signals.append((p.pid, p.start_time, sig))
            if sig == KILL or not p.ignores_term:
                self.table.remove(p.pid)

    def remaining(self) -> bool:
        return bool(self.members())

    def wait(self, secs: float) -> None:
        self.clock.t += max(secs, 0.001)


@pytest.mark.parametrize(
    ("name", "procs", "expected_signals", "max_elapsed"),
    [
        (
            "parent death: SIGTERM fallback reaches SIGKILL",
            [adapter_proc(ignores_term=True), grandchild_proc(ignores_term=True)],
            [TERM, KILL],
            3.5,
        ),
        (
            "parent death: group obeys SIGTERM, no SIGKILL needed",
            [adapter_proc(), grandchild_proc()],
            [TERM],
            0.0,
        ),
        (
            "parent death: grandchild alone ignores SIGTERM",
            [adapter_proc(), grandchild_proc(ignores_term=True)],
            [TERM, KILL],
            3.5,
        ),
    ],
)
def test_parent_death_terminator(name: str, procs: list[FakeProc], expected_signals: list[int], max_elapsed: float) -> None:
    table = FakeProcessTable([replace(p) for p in procs])
    clock = VirtualClock()
    group = FakeGroup(table, ADAPTER_PID, clock)
    sent = Terminator(group.signal_all, group.remaining, group.wait, now=clock.now).run(GRACE_MS / 1000)
    assert sent == expected_signals == group.sent
    assert not group.members(), "nothing of the group may survive"
    assert clock.t <= max_elapsed
    if KILL in expected_signals:
        # The wrapper stayed alive for the whole grace before the fallback fired.
        assert clock.t >= GRACE_MS / 1000


# ---------------------------------------------------------------------- legacy records


ADOPT_SECS = 5.0


def _forged_exchange(control: Control, uid_seen: int) -> dict[str, object]:
    """One connection to ``control`` as a peer without the service credential (a proof
    under a guessed key), seen by the kernel as ``uid_seen``: the wrapper's answer."""
    ours, theirs = socket.socketpair()
    answer: dict[str, object] = {}

    def attacker() -> None:
        with contextlib.suppress(OSError, ValueError):
            hello, _ = recv_line(theirs)
            send_line(theirs, {"op": OP_ADOPT, "nonce": "11" * 16, "proof": proof(
                b"guessed" * 4, ROLE_SERVICE, OP_ADOPT, LEASE, str(hello["nonce"]), "11" * 16)})
            answer.update(recv_line(theirs)[0])
        theirs.close()

    thread = threading.Thread(target=attacker)
    thread.start()
    with mock.patch("services.lifecycle.wrapper.control.peer_credentials",
                    return_value=(4242, uid_seen, uid_seen)):
        control._exchange(ours, lambda: {"adapter_pid": ADAPTER_PID, "pgid": ADAPTER_PID})
    thread.join(5)
    return answer


@pytest.mark.parametrize(
    ("name", "adopted_at", "forged_uid", "expected_signals"),
    [
        # A restarted lifecycle service re-adopts it within the window: nothing is signalled.
        ("lifecycle death, re-adopted within the window", 2.0, None, []),
        # Nobody restarts it: the seed's cleanup once the window is over, no orphan.
        ("lifecycle death, no restart: cleanup after the window", None, None, [TERM, KILL]),
        # A peer of this uid without the credential cannot adopt it: cleanup all the same.
        ("forged adoption without the credential", None, "same", [TERM, KILL]),
        # A peer of another uid is not even greeted.
        ("forged adoption from another uid", None, "other", [TERM, KILL]),
    ],
)
def test_parent_death_adoption_window(tmp_path: Path, name: str, adopted_at: float | None,
                                      forged_uid: str | None, expected_signals: list[int]) -> None:
    table = FakeProcessTable([adapter_proc(ignores_term=True), grandchild_proc(ignores_term=True)])
    clock = VirtualClock()
    group = FakeGroup(table, ADAPTER_PID, clock)
    window = AdoptionWindow(ADOPT_SECS, clock.now)
    control = Control(str(tmp_path / "c.sock"), b"k" * 32, LEASE, INSTANCE, -1, -1)
    if forged_uid is not None:
        uid = os.getuid() if forged_uid == "same" else os.getuid() + 1
        answer = _forged_exchange(control, uid)
        assert answer == ({"ok": False, "error": "refused"} if forged_uid == "same" else {})
        assert control.adopter is None and control.refused == 1
    # The service died at t=0; the wrapper's loop polls every quarter second.
    step = window.step(parent_alive=False, adopted=False)
    while step == WAIT:
        group.wait(0.25)
        adopted = adopted_at is not None and clock.t >= adopted_at
        step = window.step(parent_alive=False, adopted=adopted)
        if adopted:
            break
    if step == CLEANUP:
        assert clock.t >= ADOPT_SECS, "the window ran to its end first"
        sent = Terminator(group.signal_all, group.remaining, group.wait, now=clock.now).run(
            GRACE_MS / 1000)
        assert not group.members(), "no orphan outlives the window"
    else:
        assert step == SUPERVISE and clock.t < ADOPT_SECS
        sent = []
        assert len(group.members()) == 2, "adopted: the adapter and its child live on"
    assert sent == expected_signals == group.sent


@pytest.mark.parametrize(
    ("name", "record_kwargs", "procs", "signalled"),
    [
        (
            "legacy: shell-quoted stored command equals the live argv",
            {"command": shlex.join(["/opt/my agent/run", "--flag", "it's"])},
            [FakeProc(300, 1, 300, 5, ("/opt/my agent/run", "--flag", "it's")), FakeProc(301, 300, 300, 6, ("child",))],
            [301, 300],
        ),
        (
            "legacy: different live command is left alone",
            {"command": "/opt/agent/run --flag"},
            [FakeProc(300, 1, 300, 5, ("/usr/bin/postgres",))],
            [],
        ),
        (
            "legacy: wrapper root owned",
            {"command": "ignored", "wrapper_root": ROOT, "expects_wrapper": True},
            [FakeProc(300, 1, 300, 5, (PY, f"{ROOT}/old_wrapper.py", "--", "agent"))],
            [300],
        ),
        (
            "legacy: wrapper under another gateway's root is left alone",
            {"command": "ignored", "wrapper_root": ROOT, "expects_wrapper": True},
            [FakeProc(300, 1, 300, 5, (PY, f"{OTHER_ROOT}/old_wrapper.py", "--", "agent"))],
            [],
        ),
        (
            "legacy: stored PID alone (process gone) signals nothing",
            {"command": "agent"},
            [FakeProc(999, 1, 999, 5, ("agent",))],
            [],
        ),
        (
            "legacy: exact command of another user's process is left alone",
            {"command": "agent"},
            [FakeProc(300, 1, 300, 5, ("agent",), uids=(0, 0))],
            [],
        ),
        (
            "legacy: exact command of a process that changed uid (set-uid) is left alone",
            {"command": "agent"},
            [FakeProc(300, 1, 300, 5, ("agent",), uids=(FAKE_SERVICE_UID, 0))],
            [],
        ),
        (
            "legacy: exact command of a process whose uid cannot be read is left alone",
            {"command": "agent"},
            [FakeProc(300, 1, 300, 5, ("agent",), uids=None)],
            [],
        ),
        (
            "legacy: wrapper record whose root runs as another user is left alone",
            {"command": "ignored", "wrapper_root": ROOT, "expects_wrapper": True},
            [FakeProc(300, 1, 300, 5, (PY, f"{ROOT}/old_wrapper.py", "--", "agent"), uids=(0, 0))],
            [],
        ),
        (
            "legacy: another user's child in the record's tree is never signalled",
            {"command": "agent"},
            [FakeProc(300, 1, 300, 5, ("agent",)), FakeProc(301, 300, 300, 6, ("su",), uids=(0, 0))],
            [300],
        ),
        (
            "legacy: recorded birth identity mismatch",
            {"command": "agent", "start_time": 4},
            [FakeProc(300, 1, 300, 5, ("agent",))],
            [],
        ),
    ],
)
async def test_legacy_records(name: str, record_kwargs: dict[str, object], procs: list[FakeProc], signalled: list[int], store: LeaseStore) -> None:
    from services.lifecycle.reaping.legacy import LegacyRecord

    table = FakeProcessTable([replace(p) for p in procs])
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=100, sleep=clock.sleep, clock=clock.now)
    record = LegacyRecord(pid=300, **record_kwargs)  # type: ignore[arg-type]
    result = await reaper.close_legacy(record)
    assert [pid for pid, _, _ in table.signals] == signalled
    if signalled:
        assert result.unverified_reason == ""
        assert set(result.terminated_pids) == set(signalled)
    else:
        assert result.terminated_pids == ()
    assert {p.pid for p in procs if p.pid not in signalled} <= set(table.procs)


async def test_legacy_listing_unavailable_signals_nothing(store: LeaseStore) -> None:
    from services.lifecycle.reaping.legacy import LegacyRecord

    table = FakeProcessTable([FakeProc(300, 1, 300, 5, ("agent",))])
    table.listing_available = False
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=100)
    result = await reaper.close_legacy(LegacyRecord(pid=300, command="agent"))
    assert table.signals == [] and REASON_LISTING in result.unverified_reason


async def test_the_table_never_signals_another_users_process() -> None:
    """The one place every signal passes: another uid, a changed uid or an unreadable one
    is refused there, whatever verified before."""
    table = FakeProcessTable([
        FakeProc(300, 1, 300, 5, ("agent",)),
        FakeProc(301, 1, 301, 5, ("agent",), uids=(0, 0)),
        FakeProc(302, 1, 302, 5, ("agent",), uids=(FAKE_SERVICE_UID, 0)),
        FakeProc(303, 1, 303, 5, ("agent",), uids=(0, FAKE_SERVICE_UID)),
        FakeProc(304, 1, 304, 5, ("agent",), uids=None),
    ])
    for pid in (301, 302, 303, 304):
        assert not await table.signal(pid, 5, KILL)
        assert not await table.runs_as_service(table.procs[pid].info())
    assert await table.runs_as_service(table.procs[300].info())
    assert await table.signal(300, 5, KILL)
    assert table.signalled_pids() == {300} and set(table.procs) == {301, 302, 303, 304}
