"""A failing signal or table read is a reported outcome, never an escaping exception.

A close whose signal is refused must still end (the process is reported as a
survivor), not raise with the lease stuck in closing; a startup reap must reap
the other leases and let the lifecycle service start even when one lease's
processes cannot be read or signalled (SPEC §13: fail closed, retry later).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from services.lifecycle.adapters.spawn import WrapperPaths, install_wrapper
from services.lifecycle.api.server import LEASES_DB_NAME, start_lifecycle_server
from services.lifecycle.controller import LifecycleController
from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import FakeProc, FakeProcessTable
from services.lifecycle.processes.verify import Owner
from services.lifecycle.reaping.reaper import Reaper
from tests.lifecycle.conftest import make_config
from tests.lifecycle.test_simulator import (
    ADAPTER_PID,
    GRANDCHILD_PID,
    INSTANCE,
    KILL,
    LEASE,
    PY,
    ROOT,
    TERM,
    WRAPPER,
    WRAPPER_PID,
    VirtualClock,
    full_tree,
    make_lease,
    marks,
    wrapper_argv,
)

OTHER_LEASE = "lease-2"
OTHER_ROOT_PID, OTHER_ADAPTER_PID = 5200, 5201


class RefusingTable(FakeProcessTable):
    """A simulated table whose signals to ``refuse`` and environment reads of
    ``unreadable`` raise, as a real kernel or a parse error might."""

    def __init__(self, procs: list[FakeProc]) -> None:
        super().__init__(procs)
        self.refuse: set[int] = set()
        self.unreadable: set[int] = set()
        self.refused: list[tuple[int, int]] = []

    async def signal(self, pid: int, start_time: int, sig: int) -> bool:
        if pid in self.refuse:
            self.refused.append((pid, sig))
            raise PermissionError(1, "Operation not permitted")
        return await super().signal(pid, start_time, sig)

    async def environ(self, pid: int, start_time: int) -> Mapping[str, str] | None:
        if pid in self.unreadable:
            raise PermissionError(13, f"Permission denied: /proc/{pid}/environ")
        return await super().environ(pid, start_time)


def other_lease() -> LeaseRecord:
    return make_lease(
        wrapper_argv(OTHER_LEASE),
        lease_id=OTHER_LEASE,
        session_key="agent:a:acp:s2",
        root_pid=OTHER_ROOT_PID,
        root_start_time=20_000,
        process_group_id=OTHER_ADAPTER_PID,
        adapter_pid=OTHER_ADAPTER_PID,
    )


def other_tree() -> list[FakeProc]:
    return [
        FakeProc(OTHER_ROOT_PID, 77, 77, 20_000, wrapper_argv(OTHER_LEASE), PY, marks(OTHER_LEASE)),
        FakeProc(OTHER_ADAPTER_PID, OTHER_ROOT_PID, OTHER_ADAPTER_PID, 20_001, ("agent",), "agent",
                 marks(OTHER_LEASE)),
    ]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LeaseStore]:
    s = await LeaseStore.open(tmp_path / "leases.db")
    yield s
    await s.close()


async def test_a_refused_signal_ends_the_close_with_a_survivor(store: LeaseStore) -> None:
    table = RefusingTable(full_tree())
    table.refuse = {ADAPTER_PID}
    await store.insert(make_lease())
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=3000, sleep=clock.sleep,
                    clock=clock.now, wall_ms=lambda: 123_456)

    result = await reaper.close(LEASE, "test")

    # SIGTERM and the SIGKILL escalation were both tried and refused...
    assert table.refused == [(ADAPTER_PID, TERM), (ADAPTER_PID, KILL)]
    # ...the rest of the tree was still stopped, and the adapter is reported, not raised.
    assert [(pid, sig) for pid, _, sig in table.signals] == [(GRANDCHILD_PID, TERM), (WRAPPER_PID, TERM)]
    assert result.surviving_pids == (ADAPTER_PID,)
    assert set(result.terminated_pids) == {GRANDCHILD_PID, WRAPPER_PID}
    stored = await store.get(LEASE)
    assert stored is not None and stored.state == LeaseState.CLOSED  # not stuck in closing
    assert result.lease is not None and result.lease.state == LeaseState.CLOSED


async def test_an_unreadable_lease_does_not_stop_the_others_from_being_reaped(
    tmp_path: Path, store: LeaseStore
) -> None:
    table = RefusingTable([*full_tree(), *other_tree()])
    table.unreadable = {WRAPPER_PID}
    await store.insert(make_lease())
    await store.insert(other_lease())
    controller = LifecycleController(
        store=store, table=table, instance_id=INSTANCE, state_dir=tmp_path,
        wrapper=WrapperPaths(root=Path(ROOT), path=Path(WRAPPER)), term_grace_ms=10,
        retention_secs=3600,
    )

    results = {r.lease.lease_id: r for r in await controller.reap_orphans("startup") if r.lease}

    # The unreadable lease: nothing signalled, back to open for a later retry.
    assert results[LEASE].lease is not None and results[LEASE].lease.state == LeaseState.OPEN
    assert "verification failed" in results[LEASE].unverified_reason
    assert all(table.alive(pid) for pid in (WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID))
    # The other lease was reaped as usual.
    assert results[OTHER_LEASE].lease is not None
    assert results[OTHER_LEASE].lease.state == LeaseState.CLOSED
    assert table.signalled_pids() == {OTHER_ROOT_PID, OTHER_ADAPTER_PID}


class BrokenListingTable(FakeProcessTable):
    """A simulated table whose listing fails with an unexpected error."""

    async def list_all(self) -> list:  # type: ignore[type-arg]
        raise RuntimeError("simulated /proc parse failure")


async def test_a_failing_startup_reap_does_not_stop_the_service_starting(tmp_path: Path) -> None:
    cfg = make_config(tmp_path / "gw")
    state_dir = cfg.lifecycle_state_dir
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    lease = make_lease(gateway_instance_id=instance_id, wrapper_root=str(wrapper.root),
                       wrapper_path=str(wrapper.path))
    seeded = await LeaseStore.open(state_dir / LEASES_DB_NAME)
    await seeded.insert(lease)
    await seeded.close()

    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock",
                                          proctable=BrokenListingTable(full_tree()))
    await server.stop()

    reopened = await LeaseStore.open(state_dir / LEASES_DB_NAME)
    try:
        stored = await reopened.get(LEASE)
        # Nothing could be verified: the lease is kept for a later reap, not ended.
        assert stored is not None and stored.state == LeaseState.OPEN
    finally:
        await reopened.close()
