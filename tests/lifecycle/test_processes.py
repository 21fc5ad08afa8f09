"""Real-process lifecycle tests: the real wrapper, real adapter stand-ins, real signals.

1. kill -9 of the lifecycle service → adapter and grandchild gone within 3 s;
2. an adapter that ignores SIGTERM is SIGKILLed on close;
3. two lifecycle services (different instance ids and state dirs) on one host
   never signal each other's processes, on close, on ReapOrphans, or on
   startup reaping; a second run on a live run's state dir (another slot) leaves
   its leases alone, a run after it died (its slot free) reaps them;
4. a lease pointing at a live unrelated process (same PID, other birth) is
   never signalled;
5. a restart of the lifecycle service reaps the previous run's surviving leases.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import grpc
import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.grpc_channel import wait_healthy
from services.common.grpc_server import RunningServer
from services.lifecycle.adapters.spawn import install_wrapper
from services.lifecycle.api.server import start_lifecycle_server
from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.instance_slots import acquire_slot
from services.lifecycle.leases.store import LeaseRecord, LeaseStore
from services.lifecycle.processes.table import PsutilProcessTable
from services.lifecycle.processes.verify import command_hash
from tests.launches import ensure_request, service_channel
from tests.lifecycle.conftest import (
    ProcessGuard,
    Scripts,
    gone,
    make_config,
    read_pidfile,
    start_service_process,
    wait_until,
)

pytestmark = pytest.mark.slow


class Client:
    """A stub on a fresh channel."""

    def __init__(self, address: str) -> None:
        self.channel = service_channel(address)
        self.stub = lifecycle_pb2_grpc.LifecycleServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close(None)


async def ensure_tree(
    client: Client, scripts: Scripts, pidfile: Path, mode: str, guard: ProcessGuard, key: str = "agent:t:acp:1"
) -> tuple[pb.Lease, dict[str, psutil.Process]]:
    """Spawn a tree adapter (adapter + grandchild) and track wrapper, adapter, grandchild."""
    resp = await client.stub.EnsureSession(
        ensure_request(session_key=key, command=sys.executable, args=[str(scripts.tree), str(pidfile), mode])
    )
    assert resp.spawned
    procs = {"wrapper": guard.track(resp.lease.root_pid)}
    pids = await read_pidfile(pidfile)
    procs["adapter"] = guard.track(pids["adapter"])
    procs["grandchild"] = guard.track(pids["grandchild"])
    assert resp.lease.adapter_pid == pids["adapter"]
    assert resp.lease.process_group_id == pids["adapter"]
    assert psutil.Process(pids["grandchild"]).ppid() == pids["adapter"]
    return resp.lease, procs


async def verified_pids(client: Client, lease_id: str) -> set[int]:
    v = await client.stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id=lease_id))
    assert v.verified, v.reason
    return {p.pid for p in v.processes}


async def lease_state(client: Client, lease_id: str) -> int:
    resp = await client.stub.ListLeases(pb.ListLeasesRequest())
    return next(x.state for x in resp.leases if x.lease_id == lease_id)


async def wait_service(address: str, proc: asyncio.subprocess.Process) -> None:
    channel = service_channel(address)
    try:
        await wait_healthy(channel, within=20.0)
    except TimeoutError:
        raise AssertionError(f"service did not become healthy (exit {proc.returncode})") from None
    finally:
        await channel.close(None)


# ---------------------------------------------------------------------- 1


async def test_kill_9_of_service_leaves_no_adapter_or_grandchild(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg_dir = tmp_path / "gw"
    cfg = make_config(cfg_dir, term_grace_ms=400)
    service = await start_service_process(cfg_dir, tmp_path / "service.log")
    guard.track(service.pid)
    address = f"unix:{cfg.data_dir}/run/lifecycle.sock"
    await wait_service(address, service)
    client = Client(address)
    try:
        # Both adapter and grandchild ignore SIGTERM: only the SIGKILL fallback ends them.
        lease, procs = await ensure_tree(client, scripts, tmp_path / "pids.json", "ignore", guard)
        assert await verified_pids(client, lease.lease_id) == {p.pid for p in procs.values()}
    finally:
        await client.close()
    service.send_signal(signal.SIGKILL)
    await service.wait()
    await wait_until(lambda: all(gone(p) for p in procs.values()), 3.0, "adapter tree gone after kill -9")


# ---------------------------------------------------------------------- 2


async def test_adapter_ignoring_sigterm_is_killed_on_close(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    client = Client(server.address)
    try:
        lease, procs = await ensure_tree(client, scripts, tmp_path / "pids.json", "ignore", guard)
        resp = await client.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease.lease_id, reason="close"))
        assert resp.unverified_reason == ""
        assert set(resp.terminated_pids) == {p.pid for p in procs.values()}
        assert list(resp.surviving_pids) == []
        assert resp.lease.state == pb.LEASE_STATE_CLOSED
        assert all(gone(p) for p in procs.values())
        # Closing again is idempotent and signals nothing.
        again = await client.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease.lease_id))
        assert again.lease.state == pb.LEASE_STATE_CLOSED and list(again.terminated_pids) == []
    finally:
        await client.close()
        await server.stop()


# ---------------------------------------------------------------------- 3


async def test_two_gateways_never_signal_each_other(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg_a = make_config(tmp_path / "a", term_grace_ms=300)
    cfg_b = make_config(tmp_path / "b", term_grace_ms=300)
    # A's slot is the test's to drop: as the kernel does when A's process dies.
    slot_a = await asyncio.to_thread(acquire_slot, cfg_a.lifecycle_state_dir)
    server_a = await start_lifecycle_server(cfg_a, f"unix:{tmp_path}/a.sock", slot=slot_a)
    server_b = await start_lifecycle_server(cfg_b, f"unix:{tmp_path}/b.sock")
    a, b = Client(server_a.address), Client(server_b.address)
    servers: list[RunningServer] = [server_a, server_b]
    try:
        inst_a = await a.stub.GetInstance(pb.GetInstanceRequest())
        inst_b = await b.stub.GetInstance(pb.GetInstanceRequest())
        assert inst_a.gateway_instance_id != inst_b.gateway_instance_id
        assert inst_a.wrapper_root != inst_b.wrapper_root

        lease_a, procs_a = await ensure_tree(a, scripts, tmp_path / "a1.json", "obey", guard, key="agent:x:acp:1")
        lease_b, procs_b = await ensure_tree(b, scripts, tmp_path / "b1.json", "ignore", guard, key="agent:x:acp:1")

        # Close in A: A's tree gone, B's untouched.
        closed = await a.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease_a.lease_id))
        assert set(closed.terminated_pids) == {p.pid for p in procs_a.values()}
        assert all(gone(p) for p in procs_a.values())
        assert not any(gone(p) for p in procs_b.values())
        # A does not even know B's lease.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease_b.lease_id))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        reaped = await a.stub.ReapOrphans(pb.ReapOrphansRequest())
        assert all(r.lease_id != lease_b.lease_id for r in reaped.results)

        # A leaves a second lease behind (as a crashed run would), and B's lease row
        # is planted in A's store under B's instance id (same lease id, other instance).
        lease_a2, procs_a2 = await ensure_tree(a, scripts, tmp_path / "a2.json", "obey", guard, key="agent:x:acp:2")
        store = await LeaseStore.open(cfg_a.lifecycle_state_dir / "leases.db")
        try:
            await store.insert(LeaseRecord(
                lease_id=lease_b.lease_id, gateway_instance_id=lease_b.gateway_instance_id,
                session_key=lease_b.session_key, wrapper_root=lease_b.wrapper_root,
                wrapper_path=lease_b.wrapper_path, command_hash=lease_b.command_hash,
                started_at=lease_b.started_at, root_pid=lease_b.root_pid,
                root_start_time=lease_b.root_start_time, process_group_id=lease_b.process_group_id,
                adapter_pid=lease_b.adapter_pid,
            ))
        finally:
            await store.close()
        # A second run on A's state dir while A lives: another slot, A's leases untouched.
        beside = await start_lifecycle_server(cfg_a, f"unix:{tmp_path}/a-beside.sock")
        servers.append(beside)
        a_beside = Client(beside.address)
        try:
            inst_beside = await a_beside.stub.GetInstance(pb.GetInstanceRequest())
        finally:
            await a_beside.close()
        assert (inst_a.slot, inst_beside.slot) == (0, 1)
        assert inst_beside.install_id == inst_a.install_id == inst_a.gateway_instance_id
        assert inst_beside.gateway_instance_id == f"{inst_a.gateway_instance_id}-s1"
        assert not any(gone(p) for p in procs_a2.values()), "a live slot's tree was reaped"
        # A's run dies as a crashed one would (its slot's lock drops), leaving lease a2.
        slot_a.release()
        # Startup reaping of a new A run on A's state dir: reaps A's leftover, never B's.
        server_a_next = await start_lifecycle_server(cfg_a, f"unix:{tmp_path}/a-next.sock")
        servers.append(server_a_next)
        await wait_until(lambda: all(gone(p) for p in procs_a2.values()), 3.0, "A's leftover reaped")
        assert not any(gone(p) for p in procs_b.values())
        a_next = Client(server_a_next.address)
        try:
            assert await lease_state(a_next, lease_a2.lease_id) == pb.LEASE_STATE_CLOSED
            assert await lease_state(a_next, lease_b.lease_id) == pb.LEASE_STATE_OPEN
            refused = await a_next.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease_b.lease_id))
            assert "another gateway" in refused.unverified_reason
            assert list(refused.terminated_pids) == []
        finally:
            await a_next.close()
        assert not any(gone(p) for p in procs_b.values())
        assert await verified_pids(b, lease_b.lease_id) == {p.pid for p in procs_b.values()}

        # B still owns and reaps its own tree.
        closed_b = await b.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease_b.lease_id))
        assert set(closed_b.terminated_pids) == {p.pid for p in procs_b.values()}
    finally:
        await a.close()
        await b.close()
        for server in reversed(servers):
            await server.stop()


# ---------------------------------------------------------------------- 4


async def test_lease_on_a_live_unrelated_process_is_never_signalled(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    marker = tmp_path / "signals.txt"
    # The test itself starts the unrelated process (so only it may ever signal it).
    stranger = await asyncio.create_subprocess_exec(sys.executable, str(scripts.unrelated), str(marker))
    guard.track(stranger.pid)
    await wait_until(lambda: Path(str(marker) + ".ready").exists(), 10.0, "stranger ready")
    info = await PsutilProcessTable().get(stranger.pid)
    assert info is not None

    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    state_dir = cfg.lifecycle_state_dir
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    argv = [sys.executable, "-I", "-S", str(wrapper.path), "--lease-id", "reused", "--", "agent"]
    common = {
        "gateway_instance_id": instance_id, "session_key": "agent:t:acp:9",
        "wrapper_root": str(wrapper.root), "wrapper_path": str(wrapper.path),
        "command_hash": command_hash(argv), "started_at": 1, "root_pid": stranger.pid,
        "process_group_id": info.pgid, "adapter_pid": stranger.pid,
    }
    store = await LeaseStore.open(state_dir / "leases.db")
    try:
        # Same PID, older birth: the PID was reused by the stranger.
        await store.insert(LeaseRecord(lease_id="reused", root_start_time=info.start_time - 50, **common))  # type: ignore[arg-type]
        # Same PID and birth, but the live command is not our wrapper.
        await store.insert(LeaseRecord(lease_id="same-birth", root_start_time=info.start_time, **common))  # type: ignore[arg-type]
    finally:
        await store.close()

    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")  # startup reaping runs here
    client = Client(server.address)
    try:
        assert await lease_state(client, "reused") == pb.LEASE_STATE_LOST
        assert await lease_state(client, "same-birth") == pb.LEASE_STATE_OPEN
        for lease_id in ("reused", "same-birth"):
            resp = await client.stub.CloseSession(pb.CloseSessionRequest(lease_id=lease_id))
            assert list(resp.terminated_pids) == [] and list(resp.surviving_pids) == []
        v = await client.stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id="same-birth"))
        assert not v.verified and v.reason
        reaped = await client.stub.ReapOrphans(pb.ReapOrphansRequest())
        assert all(list(r.terminated_pids) == [] for r in reaped.results)
    finally:
        await client.close()
        await server.stop()
    assert stranger.returncode is None and not gone(psutil.Process(stranger.pid))
    assert not marker.exists(), f"the stranger received signals: {marker.read_text()}"
    stranger.kill()
    await stranger.wait()


# ---------------------------------------------------------------------- 5


async def test_restart_reaps_previous_runs_surviving_leases(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg_dir = tmp_path / "gw"
    # A long wrapper grace: after kill -9 the stubborn tree survives until the restart.
    cfg = make_config(cfg_dir, term_grace_ms=60_000)
    address = f"unix:{cfg.data_dir}/run/lifecycle.sock"
    first = await start_service_process(cfg_dir, tmp_path / "first.log")
    guard.track(first.pid)
    await wait_service(address, first)
    client = Client(address)
    try:
        lease, procs = await ensure_tree(client, scripts, tmp_path / "pids.json", "ignore", guard)
    finally:
        await client.close()
    first.send_signal(signal.SIGKILL)
    await first.wait()
    # The wrapper noticed (it SIGTERMed its group) but waits out its grace: the tree survives.
    await wait_until(lambda: procs["wrapper"].ppid() != first.pid, 3.0, "wrapper re-parented")
    assert not any(gone(p) for p in procs.values())

    second = await start_service_process(
        cfg_dir, tmp_path / "second.log", env={"ACPGATE_lifecycle__term_grace_ms": "300"}
    )
    guard.track(second.pid)
    await wait_service(address, second)  # startup reaping happens before serving
    await wait_until(lambda: all(gone(p) for p in procs.values()), 3.0, "previous run reaped")
    client = Client(address)
    try:
        assert await lease_state(client, lease.lease_id) == pb.LEASE_STATE_CLOSED
    finally:
        await client.close()
    second.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(second.wait(), 15.0) == 0
