"""The named steps of an EnsureSession spawn, one contract each (SPEC §13).

test_spawn_completion.py races whole spawns against closes with real wrappers;
here each step of Launch is held to its own promise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.lifecycle.adapters.launch import BIRTH_READ_ATTEMPTS, Launch, LaunchPlan, plan_launch
from services.lifecycle.adapters.spawn import WrapperPaths
from services.lifecycle.controller import LifecycleController
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import (
    FakeProc,
    FakeProcessTable,
    ProcessTableError,
    ProcInfo,
)
from services.lifecycle.processes.verify import command_hash
from services.lifecycle.requests import EnsureRequest, Unavailable
from tests.lifecycle.test_simulator import INSTANCE, ROOT, WRAPPER

REQ = EnsureRequest(session_key="agent:a:acp:s1", command="/bin/agent", args=("--acp",))


def pipe_ids(plan: LaunchPlan) -> list[tuple[int, int, int]]:
    """What the report pipe's fds refer to now (their numbers may be reused once closed)."""
    return [(fd, os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (plan.report_r, plan.report_w)]


def still_open(ids: list[tuple[int, int, int]]) -> bool:
    """True if any of those fds still refers to the same pipe."""
    for fd, dev, ino in ids:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino):
            return True
    return False


def plan_for(tmp_path: Path, req: EnsureRequest = REQ) -> LaunchPlan:
    return plan_launch(
        req,
        instance_id=INSTANCE,
        wrapper=WrapperPaths(root=Path(ROOT), path=Path(WRAPPER)),
        state_dir=tmp_path,
        term_grace_ms=250,
    )


@pytest.fixture
async def store(tmp_path: Path):
    s = await LeaseStore.open(tmp_path / "leases.db")
    yield s
    await s.close()


def controller_for(store: LeaseStore, table: FakeProcessTable, tmp_path: Path) -> LifecycleController:
    return LifecycleController(
        store=store,
        table=table,
        instance_id=INSTANCE,
        state_dir=tmp_path,
        wrapper=WrapperPaths(root=Path(ROOT), path=Path(WRAPPER)),
        term_grace_ms=100,
        retention_secs=3600,
    )


# ---------------------------------------------------------------------- plan_launch


def test_plan_launch_pends_a_lease_whose_hash_is_the_exact_wrapper_argv(tmp_path: Path) -> None:
    plan = plan_for(tmp_path)
    try:
        lease = plan.lease
        assert lease.pending and lease.root_pid == 0 and lease.adapter_pid == 0
        assert lease.command_hash == command_hash(plan.argv)
        assert (lease.gateway_instance_id, lease.session_key) == (INSTANCE, REQ.session_key)
        assert (lease.wrapper_root, lease.wrapper_path) == (ROOT, WRAPPER)
        argv = plan.argv
        assert argv[argv.index("--lease-id") + 1] == lease.lease_id == plan.spec.lease_id
        assert argv[argv.index("--report-fd") + 1] == str(plan.report_w)
        assert argv[argv.index("--") + 1:] == ["/bin/agent", "--acp"]
        assert plan.spec.stderr_log.parent.parent == tmp_path
        assert [fd for fd, _, _ in pipe_ids(plan)] == [plan.report_r, plan.report_w]
    finally:
        os.close(plan.report_r)
        os.close(plan.report_w)
    other = plan_for(tmp_path)
    os.close(other.report_r)
    os.close(other.report_w)
    assert other.lease.lease_id != plan.lease.lease_id


# ---------------------------------------------------------------------- insert_pending


class FailingInsertStore(LeaseStore):
    async def insert(self, lease: LeaseRecord) -> LeaseRecord:
        raise RuntimeError("disk full")


async def test_insert_pending_closes_the_report_pipe_when_the_lease_cannot_be_written(
    tmp_path: Path,
) -> None:
    store = await FailingInsertStore.open(tmp_path / "leases.db")
    try:
        controller = controller_for(store, FakeProcessTable(), tmp_path)
        plan = plan_for(tmp_path)
        ids = pipe_ids(plan)
        with pytest.raises(RuntimeError, match="disk full"):
            await Launch(controller.launch_context(), plan).run()
        assert not still_open(ids)
        assert controller.spawning == set()  # no longer in flight
        assert controller.channels == {}
    finally:
        await store.close()


# ---------------------------------------------------------------------- start_wrapper


async def test_a_wrapper_that_cannot_start_ends_its_lease_as_lost(
    tmp_path: Path, store: LeaseStore
) -> None:
    controller = controller_for(store, FakeProcessTable(), tmp_path)
    plan = plan_for(tmp_path, EnsureRequest("k", "/bin/agent", cwd=str(tmp_path / "absent")))
    launch = Launch(controller.launch_context(), plan)
    ids = pipe_ids(plan)
    await launch.insert_pending()
    with pytest.raises(Unavailable, match="cannot start the wrapper"):
        await launch.start_wrapper()
    stored = await store.get(plan.lease.lease_id)
    assert stored is not None and stored.state == LeaseState.LOST and stored.ended_at > 0
    assert not still_open(ids)
    assert controller.channels == {}


# ---------------------------------------------------------------------- read_birth


class FlakyGetTable(FakeProcessTable):
    """``get`` fails (or answers without a birth identity) for its first ``bad`` calls."""

    def __init__(self, procs: list[FakeProc], bad: int, how: str) -> None:
        super().__init__(procs)
        self.bad, self.how, self.calls = bad, how, 0

    async def get(self, pid: int) -> ProcInfo | None:
        self.calls += 1
        if self.calls <= self.bad:
            if self.how == "raise":
                raise ProcessTableError("transient")
            if self.how == "zero":
                return ProcInfo(pid, 1, pid, 0)
            return None
        return await super().get(pid)


@pytest.mark.parametrize("how", ["raise", "zero", "absent"])
async def test_read_birth_retries_until_the_identity_is_readable(
    tmp_path: Path, store: LeaseStore, how: str
) -> None:
    table = FlakyGetTable([FakeProc(4242, 1, 4242, 777)], bad=BIRTH_READ_ATTEMPTS - 1, how=how)
    launch = Launch(controller_for(store, table, tmp_path).launch_context(), plan_for(tmp_path))
    try:
        assert await launch.read_birth(4242) == 777
        assert table.calls == BIRTH_READ_ATTEMPTS
    finally:
        os.close(launch.plan.report_r)
        os.close(launch.plan.report_w)


@pytest.mark.parametrize(
    ("how", "why"), [("raise", "transient"), ("zero", "not in the process table")]
)
async def test_read_birth_never_settles_for_an_unknown_identity(
    tmp_path: Path, store: LeaseStore, how: str, why: str
) -> None:
    table = FlakyGetTable([FakeProc(4242, 1, 4242, 777)], bad=BIRTH_READ_ATTEMPTS, how=how)
    launch = Launch(controller_for(store, table, tmp_path).launch_context(), plan_for(tmp_path))
    try:
        with pytest.raises(ProcessTableError) as err:
            await launch.read_birth(4242)
        assert str(err.value) == f"cannot read the wrapper's birth identity (pid 4242): {why}"
        assert table.calls == BIRTH_READ_ATTEMPTS
    finally:
        os.close(launch.plan.report_r)
        os.close(launch.plan.report_w)
