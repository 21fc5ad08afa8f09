"""A spawn in flight completes its lease only while the lease is still open (SPEC §13).

Real wrapper, real adapter stand-ins, real signals. A close does not take the
per-key lock of EnsureSession, so it can end a pending lease before its wrapper
exists (verification finds no wrapper: lost). The spawn must then not write its
tree onto that ended lease and return it as live: it stops the tree it just
started (verified, it is ours) and fails.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest

from services.lifecycle.adapters.spawn import install_wrapper
from services.lifecycle.controller import EnsureRequest, LifecycleController, Unavailable
from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import (
    ProcessTable,
    ProcessTableError,
    ProcInfo,
    PsutilProcessTable,
)
from services.lifecycle.processes.verify import LEASE_ENV
from tests.lifecycle.conftest import ProcessGuard, Scripts, gone, wait_until

pytestmark = pytest.mark.slow


class HookedStore(LeaseStore):
    """A store that runs ``after_insert`` right after a lease is written durably."""

    after_insert: Callable[[LeaseRecord], Awaitable[None]] | None = None

    async def insert(self, lease: LeaseRecord) -> LeaseRecord:
        out = await super().insert(lease)
        hook, self.after_insert = self.after_insert, None
        if hook is not None:
            await hook(lease)
        return out


async def make_controller(
    state_dir: Path, table: ProcessTable | None = None
) -> tuple[LifecycleController, HookedStore]:
    """A controller over a real state dir, with a :class:`HookedStore`."""
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    store = await HookedStore.open(state_dir / "leases.db")
    controller = LifecycleController(
        store=store,
        table=table if table is not None else PsutilProcessTable(),
        instance_id=instance_id,
        state_dir=state_dir,
        wrapper=wrapper,
        term_grace_ms=300,
        retention_secs=3600,
    )
    return controller, store


def processes_of_lease(lease_id: str) -> builtins.list[psutil.Process]:
    """Live (non-zombie) processes whose environment carries ``lease_id``."""
    out: builtins.list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(LEASE_ENV) == lease_id:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


async def test_close_before_the_wrapper_exists_fails_the_spawn_and_stops_its_tree(
    tmp_path: Path, scripts: Scripts, guard: ProcessGuard
) -> None:
    controller, store = await make_controller(tmp_path / "state")
    seen: builtins.list[str] = []

    async def close_it(lease: LeaseRecord) -> None:
        # The close lands between the durable pending lease and the wrapper's start.
        seen.append(lease.lease_id)
        result = await controller.close_session(lease_id=lease.lease_id, reason="racing-close")
        assert result.lease is not None and result.lease.state == LeaseState.LOST

    store.after_insert = close_it
    pidfile = tmp_path / "tree.json"
    try:
        with pytest.raises(Unavailable, match="closed while it was starting"):
            await controller.ensure_session(
                EnsureRequest(
                    session_key="agent:r:acp:1",
                    command=sys.executable,
                    args=(str(scripts.tree), str(pidfile), "obey"),
                )
            )
        (lease_id,) = seen
        for proc in processes_of_lease(lease_id):
            guard.track(proc.pid)
        # The ended lease was not revived with the stray tree written onto it.
        stored = await store.get(lease_id)
        assert stored is not None and stored.state == LeaseState.LOST
        assert stored.root_pid == 0 and stored.adapter_pid == 0
        assert controller.channel(lease_id) is None
        # Nothing of the spawn is left running: wrapper, adapter and grandchild.
        await wait_until(lambda: not processes_of_lease(lease_id), 5.0, "the stray tree to be gone")
        # A new EnsureSession for the key spawns a fresh, working lease.
        lease, spawned, _ = await controller.ensure_session(
            EnsureRequest(session_key="agent:r:acp:1", command=sys.executable, args=(str(scripts.echo),))
        )
        guard.track(lease.root_pid)
        assert spawned and lease.state == LeaseState.OPEN and lease.lease_id != lease_id
    finally:
        await controller.close_all()
        await store.close()


class UnreadableBirthTable(PsutilProcessTable):
    """The real table, except that the next ``failures`` reads of one process fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.failed_pids: builtins.list[int] = []

    async def get(self, pid: int) -> ProcInfo | None:
        if self.failures > 0:
            self.failures -= 1
            self.failed_pids.append(pid)
            raise ProcessTableError(f"cannot read /proc/{pid}/stat: simulated")
        return await super().get(pid)


async def test_a_transient_birth_read_failure_is_retried(
    tmp_path: Path, scripts: Scripts, guard: ProcessGuard
) -> None:
    table = UnreadableBirthTable(failures=2)
    controller, store = await make_controller(tmp_path / "state", table)
    try:
        lease, spawned, _ = await controller.ensure_session(
            EnsureRequest(session_key="agent:b:acp:1", command=sys.executable, args=(str(scripts.echo),))
        )
        wrapper = guard.track(lease.root_pid)
        guard.track(lease.adapter_pid)
        assert spawned
        # The stored birth is the real one, not 0: the live wrapper verifies...
        info = await PsutilProcessTable().get(lease.root_pid)
        assert info is not None and lease.root_start_time == info.start_time
        assert (await controller.verify(lease.lease_id)).verified
        assert table.failed_pids == [lease.root_pid, lease.root_pid]
        # ...so a close signals it and ends the lease closed, not lost.
        result = await controller.close_session(lease_id=lease.lease_id)
        assert result.lease is not None and result.lease.state == LeaseState.CLOSED
        assert lease.root_pid in result.terminated_pids
        await wait_until(lambda: gone(wrapper), 5.0, "the wrapper to exit")
    finally:
        await controller.close_all()
        await store.close()


async def test_an_unreadable_birth_fails_the_spawn_and_stops_the_wrapper(
    tmp_path: Path, scripts: Scripts, guard: ProcessGuard
) -> None:
    table = UnreadableBirthTable(failures=1000)
    controller, store = await make_controller(tmp_path / "state", table)
    try:
        with pytest.raises(Unavailable, match="birth identity"):
            await controller.ensure_session(
                EnsureRequest(
                    session_key="agent:b:acp:2", command=sys.executable, args=(str(scripts.echo),)
                )
            )
        table.failures = 0
        (lease,) = await store.list(session_key="agent:b:acp:2")
        assert lease.state == LeaseState.CLOSED
        assert lease.root_start_time == 0 and controller.channel(lease.lease_id) is None
        wrapper_pid = table.failed_pids[0]
        assert not psutil.pid_exists(wrapper_pid) or gone(psutil.Process(wrapper_pid))
        await wait_until(lambda: not processes_of_lease(lease.lease_id), 5.0, "the lease's tree to be gone")
    finally:
        await controller.close_all()
        await store.close()


class EndsBeforeAdapterCompletion(HookedStore):
    """A store where the lease ends (a close completed) just before the spawn records
    the adapter's group and PID, i.e. after the wrapper reported the adapter's start."""

    ended: str = ""

    async def update(
        self, lease_id: str, *, expect: Iterable[LeaseState] | None = None, **changes: Any
    ) -> LeaseRecord | None:
        if "adapter_pid" in changes and changes["adapter_pid"] and not self.ended:
            self.ended = lease_id
            await super().update(lease_id, state=LeaseState.CLOSED, ended_at=1)
        return await super().update(lease_id, expect=expect, **changes)


async def test_a_lease_ended_after_the_adapter_started_fails_the_spawn_and_stops_its_tree(
    tmp_path: Path, scripts: Scripts, guard: ProcessGuard
) -> None:
    state_dir = tmp_path / "state"
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    store = await EndsBeforeAdapterCompletion.open(state_dir / "leases.db")
    controller = LifecycleController(
        store=store, table=PsutilProcessTable(), instance_id=instance_id, state_dir=state_dir,
        wrapper=wrapper, term_grace_ms=300, retention_secs=3600,
    )
    pidfile = tmp_path / "tree.json"
    try:
        with pytest.raises(Unavailable, match="closed while it was starting"):
            await controller.ensure_session(
                EnsureRequest(
                    session_key="agent:r:acp:2",
                    command=sys.executable,
                    args=(str(scripts.tree), str(pidfile), "obey"),
                )
            )
        lease_id = store.ended
        for proc in processes_of_lease(lease_id):
            guard.track(proc.pid)
        stored = await store.get(lease_id)
        assert stored is not None and stored.state == LeaseState.CLOSED
        assert stored.adapter_pid == 0  # the ended lease was not completed
        assert controller.channel(lease_id) is None
        await wait_until(lambda: not processes_of_lease(lease_id), 5.0, "the stray tree to be gone")
    finally:
        await controller.close_all()
        await store.close()
