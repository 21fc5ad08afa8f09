"""Two installs on one host never touch each other's processes (SPEC §13).

Two lifecycle services run as real processes, each with its own config dir,
instance id and wrapper root, each with a lease whose adapter survives SIGTERM
and has detached a ``setsid`` grandchild. Install A then does everything that
scans or signals: its wrapper is SIGKILLed (the death reap reads every
process's environment), rows pointing at B's processes and B's lease id are
planted in A's store and closed (also under a slot of A's nobody holds, which A's next
start reaps as a dead slot's), A is SIGKILLed and restarted (startup reap).
B's processes record every catchable signal: none may arrive, and B still
verifies and reaps its whole tree itself at the end.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.config import Config
from services.common.grpc_channel import wait_healthy
from services.common.service_key import service_key_path
from services.lifecycle.leases.store import LeaseRecord, LeaseStore
from services.lifecycle.processes.table import PsutilProcessTable
from services.lifecycle.processes.verify import (
    REASON_OTHER_INSTANCE,
    REASON_WRAPPER_ROOT,
    command_hash,
)
from tests.launches import dial
from tests.lifecycle.conftest import ProcessGuard, make_config, start_service_process
from tests.security.procs import alive, ensure_detacher, eventually, guard, kill_exact

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

pytestmark = pytest.mark.slow

SESSION_KEY = "agent:same:acp:1"  # the same key in both installs


@dataclass
class Install:
    """One install: its config dir, its lifecycle service process and a stub on it."""

    config_dir: Path
    cfg: Config
    service: asyncio.subprocess.Process
    channel: object
    stub: lifecycle_pb2_grpc.LifecycleServiceStub

    @classmethod
    async def start(cls, config_dir: Path, guard: ProcessGuard, log_name: str) -> Install:
        """``acpgate lifecycle-service`` on ``config_dir``, healthy (startup reap done)."""
        cfg = make_config(config_dir, term_grace_ms=300)
        # Each install makes its own service key (not the tests' shared one).
        service_key_path(cfg.data_dir).unlink()
        service = await start_service_process(config_dir, config_dir.parent / log_name)
        guard.track(service.pid)
        channel = dial(cfg, f"unix:{cfg.data_dir}/run/lifecycle.sock")
        await wait_healthy(channel, within=20.0)
        return cls(config_dir, cfg, service, channel,
                   lifecycle_pb2_grpc.LifecycleServiceStub(channel))

    @property
    def leases_db(self) -> Path:
        """Its lease store."""
        return self.config_dir / "data" / "lifecycle" / "leases.db"

    async def instance(self) -> pb.Instance:
        """GetInstance."""
        return await self.stub.GetInstance(pb.GetInstanceRequest())

    async def state(self, lease_id: str) -> int:
        """The stored state of one lease."""
        resp = await self.stub.ListLeases(pb.ListLeasesRequest())
        return next(x.state for x in resp.leases if x.lease_id == lease_id)

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        """Close the channel and stop the service with ``sig``."""
        await self.channel.close(None)  # type: ignore[attr-defined]
        if self.service.returncode is None:
            self.service.send_signal(sig)
        await asyncio.wait_for(self.service.wait(), 15.0)


def record_of(lease: pb.Lease, **changes: object) -> LeaseRecord:
    """A lease row copied from a proto ``Lease`` (then changed)."""
    row = LeaseRecord(
        lease_id=lease.lease_id, gateway_instance_id=lease.gateway_instance_id,
        session_key=lease.session_key, wrapper_root=lease.wrapper_root,
        wrapper_path=lease.wrapper_path, command_hash=lease.command_hash,
        started_at=lease.started_at, root_pid=lease.root_pid,
        root_start_time=lease.root_start_time, process_group_id=lease.process_group_id,
        adapter_pid=lease.adapter_pid,
    )
    return replace(row, **changes)  # type: ignore[arg-type]


async def a_free_pid() -> int:
    """The PID of a process that ran and is gone (as a dead wrapper's)."""
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    proc.kill()
    await proc.wait()
    assert await PsutilProcessTable().get(proc.pid) is None
    return proc.pid


async def test_two_installs_never_touch_each_other(tmp_path: Path, guard: ProcessGuard) -> None:
    a = await Install.start(tmp_path / "a", guard, "a.log")
    b = await Install.start(tmp_path / "b", guard, "b.log")
    try:
        inst_a, inst_b = await a.instance(), await b.instance()
        assert inst_a.gateway_instance_id != inst_b.gateway_instance_id
        assert inst_a.wrapper_root != inst_b.wrapper_root
        # Each install's services take only its own credential and its own seals.
        async with dial(a.cfg, f"unix:{b.cfg.data_dir}/run/lifecycle.sock") as cross:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await lifecycle_pb2_grpc.LifecycleServiceStub(cross).GetInstance(
                    pb.GetInstanceRequest())
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ensure_detacher(b.stub, tmp_path / "work-x", guard, SESSION_KEY, install=a.cfg)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        tree_a = await ensure_detacher(a.stub, tmp_path / "work-a", guard, SESSION_KEY,
                                       install=a.cfg)
        tree_b = await ensure_detacher(b.stub, tmp_path / "work-b", guard, SESSION_KEY,
                                       install=b.cfg)

        # 1. A's wrapper dies: A's reap reads every environment on the host, B's included.
        assert await kill_exact(tree_a.wrapper.pid, tree_a.lease.root_start_time)
        await eventually(lambda: not any(alive(p) for p in tree_a.processes), 10.0,
                         "A's dead wrapper's tree to be reaped by A")

        # 2. Rows in A's store that point at B.
        b_wrapper_argv = await asyncio.to_thread(tree_b.wrapper.cmdline)
        dead_pid = await a_free_pid()
        planted = [
            # B's lease id under A's instance, its wrapper gone (a PID that is free
            # now, B's wrapper's birth, so B's processes pass the birth check): A's
            # scan looks for B's lease id with A's instance id, which B's do not carry.
            record_of(tree_b.lease, gateway_instance_id=inst_a.gateway_instance_id,
                      wrapper_root=inst_a.wrapper_root, wrapper_path=tree_a.lease.wrapper_path,
                      root_pid=dead_pid),
            # B's row as B wrote it (B's instance id), under another lease id.
            record_of(tree_b.lease, lease_id="copy-of-b"),
            # A's instance and wrapper root, but naming B's live wrapper exactly.
            record_of(tree_b.lease, lease_id="points-at-b",
                      gateway_instance_id=inst_a.gateway_instance_id,
                      wrapper_root=inst_a.wrapper_root, wrapper_path=tree_a.lease.wrapper_path,
                      command_hash=command_hash(b_wrapper_argv)),
            # The same under a slot of A's that nobody holds: A's next start reaps that slot
            # as a dead one's, and must still prove nothing of B's is its.
            record_of(tree_b.lease, lease_id="dead-slot-points-at-b",
                      gateway_instance_id=f"{inst_a.install_id}-s5",
                      wrapper_root=inst_a.wrapper_root, wrapper_path=tree_a.lease.wrapper_path,
                      command_hash=command_hash(b_wrapper_argv)),
            # B's lease under a slot id of B's: not one of A's slots, never reaped by A.
            record_of(tree_b.lease, lease_id="b-slot-copy",
                      gateway_instance_id=f"{inst_b.install_id}-s1"),
        ]
        store = await LeaseStore.open(a.leases_db)
        try:
            for row in planted:
                await store.insert(row)
        finally:
            await store.close()
        reasons = {}
        for row in planted:
            closed = await a.stub.CloseSession(pb.CloseSessionRequest(lease_id=row.lease_id))
            assert list(closed.terminated_pids) == [] and list(closed.surviving_pids) == []
            reasons[row.lease_id] = closed.unverified_reason
        assert reasons["copy-of-b"] == REASON_OTHER_INSTANCE
        assert reasons["points-at-b"] == REASON_WRAPPER_ROOT
        assert reasons["dead-slot-points-at-b"] == REASON_OTHER_INSTANCE  # slot 0 is not slot 5
        assert reasons["b-slot-copy"] == REASON_OTHER_INSTANCE
        assert await a.state(tree_b.lease.lease_id) == pb.LEASE_STATE_LOST  # nothing of it found
        reaped = await a.stub.ReapOrphans(pb.ReapOrphansRequest())
        assert all(list(r.terminated_pids) == [] for r in reaped.results)

        # 3. A is SIGKILLed and restarted: its startup reap walks the planted rows again.
        await a.stop(signal.SIGKILL)
        a = await Install.start(tmp_path / "a", guard, "a2.log")
        assert await a.state("points-at-b") == pb.LEASE_STATE_OPEN
        assert await a.state("copy-of-b") == pb.LEASE_STATE_OPEN
        assert await a.state("dead-slot-points-at-b") == pb.LEASE_STATE_OPEN  # verified: not A's
        assert await a.state("b-slot-copy") == pb.LEASE_STATE_OPEN
        assert "dead_slot_reaped" in (tmp_path / "a2.log").read_text()  # slot 5 was walked

        await asyncio.sleep(0.3)  # a signal in flight would have landed by now
        assert all(alive(p) for p in tree_b.processes), "A ended one of B's processes"
        assert tree_b.signals() == "", f"B's processes got signals from A: {tree_b.signals()!r}"

        # 4. B still owns its whole tree, and reaps it.
        v = await b.stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id=tree_b.lease.lease_id))
        assert v.verified, v.reason
        assert {p.pid for p in v.processes} == {p.pid for p in tree_b.processes}
        closed_b = await b.stub.CloseSession(pb.CloseSessionRequest(lease_id=tree_b.lease.lease_id))
        assert set(closed_b.terminated_pids) == {p.pid for p in tree_b.processes}
        assert str(int(signal.SIGTERM)) in tree_b.signals().split()
    finally:
        await a.stop()
        await b.stop()
