"""Warm pools with real processes: KeepWarm, the take, refill, invalidation, reaping.

A warm adapter is an ordinary lease in state warm (lifecycle proto, KeepWarm):
verified like any, never attachable, taken by EnsureSession naming its pool
(warm → open, re-keyed), refilled in the background, retired when what it read
at start changed, closed on stop and reaped by the next run's startup reap.
"""

from __future__ import annotations

import asyncio
import json
import os
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
from services.lifecycle.adapters import pool_spec, warm
from services.lifecycle.api.server import open_controller, start_lifecycle_server
from services.lifecycle.leases.store import LeaseState
from tests.launches import ensure_request, keep_request, service_channel
from tests.lifecycle.conftest import (
    Attacher,
    ProcessGuard,
    Scripts,
    gone,
    make_config,
    start_service_process,
    wait_until,
    wait_until_async,
)

pytestmark = pytest.mark.slow

POOL = "agent:w"
Stub = lifecycle_pb2_grpc.LifecycleServiceStub


def keep(script: Path, cwd: Path, count: int = 1, *, args: tuple[str, ...] = (),
         watch: tuple[Path, ...] = (), pool: str = POOL) -> pb.KeepWarmRequest:
    return keep_request(pool=pool, command=sys.executable, args=[str(script), *args],
                              env={"EXTRA_VAR": "warm"}, cwd=str(cwd), count=count,
                              watch_paths=[str(p) for p in watch])


def take(script: Path, key: str, cwd: Path, *, args: tuple[str, ...] = (),
         pool: str = POOL) -> pb.EnsureSessionRequest:
    return ensure_request(session_key=key, command=sys.executable,
                                   args=[str(script), *args], env={"EXTRA_VAR": "warm"},
                                   cwd=str(cwd), warm_pool=pool)


async def warm_leases(stub: Stub) -> list[pb.Lease]:
    resp = await stub.ListLeases(pb.ListLeasesRequest(state=pb.LEASE_STATE_WARM))
    return list(resp.leases)


async def wait_warm(stub: Stub, n: int, guard: ProcessGuard, within: float = 20.0) -> list[pb.Lease]:
    """Wait until exactly ``n`` warm leases have their adapter recorded; track their processes."""
    async def ready() -> bool:
        leases = await warm_leases(stub)
        return len(leases) == n and all(x.adapter_pid for x in leases)
    await wait_until_async(ready, within, f"{n} warm leases")
    leases = await warm_leases(stub)
    for lease in leases:
        guard.track(lease.root_pid)
        guard.track(lease.adapter_pid)
    return leases


async def state_of(stub: Stub, lease_id: str) -> int:
    resp = await stub.ListLeases(pb.ListLeasesRequest())
    return next(x.state for x in resp.leases if x.lease_id == lease_id)


async def closed(stub: Stub, lease_id: str) -> bool:
    return await state_of(stub, lease_id) == pb.LEASE_STATE_CLOSED


def procs_of(lease: pb.Lease, guard: ProcessGuard) -> list[psutil.Process]:
    """The wrapper and adapter of ``lease`` as tracked when they were warm (birth identity)."""
    return [guard.procs[lease.root_pid], guard.procs[lease.adapter_pid]]


async def test_warm_leases_are_verified_and_never_attachable(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    resp = await stub.KeepWarm(keep(scripts.echo, tmp_path, 2))
    assert resp.ready == 0  # it fills in the background
    leases = await wait_warm(stub, 2, guard)
    assert all(x.session_key == f"{POOL}:warm" for x in leases)
    for lease in leases:
        v = await stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id=lease.lease_id))
        assert v.verified, v.reason
        assert {p.pid for p in v.processes} == {lease.root_pid, lease.adapter_pid}
    att = Attacher(stub, leases[0].lease_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await att.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "warm" in (err.value.details() or "")
    again = await stub.KeepWarm(keep(scripts.echo, tmp_path, 2))
    assert again.ready == 2  # the same spec: nothing respawned
    assert {x.lease_id for x in await warm_leases(stub)} == {x.lease_id for x in leases}


async def test_take_rekeys_a_warm_adapter_and_the_pool_refills(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    await stub.KeepWarm(keep(scripts.chatty, pool_dir, 1))
    (waiting,) = await wait_warm(stub, 1, guard)
    resp = await stub.EnsureSession(take(scripts.chatty, "agent:w:acp:1", tmp_path))
    assert resp.warm and resp.spawned
    assert resp.lease.lease_id == waiting.lease_id
    assert resp.lease.state == pb.LEASE_STATE_OPEN
    assert resp.lease.session_key == "agent:w:acp:1"
    # The same request again returns the same open lease (EnsureSession stays idempotent).
    same = await stub.EnsureSession(take(scripts.chatty, "agent:w:acp:1", tmp_path))
    assert same.lease.lease_id == waiting.lease_id and not same.spawned and not same.warm

    att = Attacher(stub, resp.lease.lease_id)
    assert (await att.read()).WhichOneof("msg") == "attached"
    hello = json.loads((await att.read_lines(1))[0])
    assert hello["env"]["ACPGATE_LEASE_ID"] == waiting.lease_id
    assert hello["env"]["EXTRA_VAR"] == "warm"
    assert hello["cwd"] == str(pool_dir)  # a warm adapter runs in the pool's cwd
    att.send("ping")
    assert await att.read_lines(1) == ["ping"]

    (refill,) = await wait_warm(stub, 1, guard)
    assert refill.lease_id != waiting.lease_id
    closed = await stub.CloseSession(pb.CloseSessionRequest(lease_id=waiting.lease_id))
    assert closed.lease.state == pb.LEASE_STATE_CLOSED
    assert await state_of(stub, refill.lease_id) == pb.LEASE_STATE_WARM


async def test_only_the_same_launch_spec_takes_a_warm_adapter(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 1))
    (waiting,) = await wait_warm(stub, 1, guard)
    other_args = await stub.EnsureSession(take(scripts.echo, "agent:w:acp:1", tmp_path, args=("3",)))
    other_pool = await stub.EnsureSession(take(scripts.echo, "agent:w:acp:2", tmp_path, pool="agent:x"))
    no_pool = await stub.EnsureSession(ensure_request(
        session_key="agent:w:acp:3", command=sys.executable, args=[str(scripts.echo)],
        env={"EXTRA_VAR": "warm"}))
    for resp in (other_args, other_pool, no_pool):
        guard.track(resp.lease.root_pid)
        assert resp.spawned and not resp.warm
        assert resp.lease.lease_id != waiting.lease_id
    assert await state_of(stub, waiting.lease_id) == pb.LEASE_STATE_WARM


async def test_concurrent_takes_never_share_an_adapter(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 2))
    waiting = {x.lease_id for x in await wait_warm(stub, 2, guard)}
    resps = await asyncio.gather(*(stub.EnsureSession(take(scripts.echo, f"agent:w:acp:{i}", tmp_path))
                                   for i in range(3)))
    for resp in resps:
        guard.track(resp.lease.root_pid)
    warm_ids = [r.lease.lease_id for r in resps if r.warm]
    assert sorted(warm_ids) == sorted(waiting)  # both taken, once each
    assert len({r.lease.lease_id for r in resps}) == 3  # the third spawned cold


@pytest.mark.parametrize("change", ["watched file", "script named in args"])
async def test_a_changed_file_retires_the_pool(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub],
        change: str) -> None:
    _, stub = served
    config = tmp_path / "config.toml"
    config.write_text("a = 1\n")
    script = tmp_path / "echo-copy.py"
    script.write_text(scripts.echo.read_text())
    await stub.KeepWarm(keep(script, tmp_path, 1, watch=(config,)))
    (stale,) = await wait_warm(stub, 1, guard)
    changed = config if change == "watched file" else script
    changed.write_text(changed.read_text() + "\n# changed\n")
    os.utime(changed, ns=(1, 1))  # a different mtime even on a coarse clock
    resp = await stub.EnsureSession(take(script, "agent:w:acp:1", tmp_path))
    guard.track(resp.lease.root_pid)
    assert not resp.warm and resp.lease.lease_id != stale.lease_id  # spawned with the new file
    await wait_until(lambda: all(gone(p) for p in procs_of(stale, guard)), 10.0, "stale adapter reaped")
    await wait_until_async(lambda: closed(stub, stale.lease_id), 10.0, "stale lease closed")
    (fresh,) = await wait_warm(stub, 1, guard)
    assert fresh.lease_id != stale.lease_id
    taken = await stub.EnsureSession(take(script, "agent:w:acp:2", tmp_path))
    assert taken.warm and taken.lease.lease_id == fresh.lease_id


async def test_the_periodic_check_retires_without_a_take(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm, "CHECK_SECS", 0.1)
    _, stub = served
    config = tmp_path / "config.toml"
    config.write_text("a = 1\n")
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 1, watch=(config,)))
    (stale,) = await wait_warm(stub, 1, guard)
    config.unlink()  # gone counts as changed too
    await wait_until(lambda: all(gone(p) for p in procs_of(stale, guard)), 10.0, "stale adapter reaped")
    (fresh,) = await wait_warm(stub, 1, guard)
    assert fresh.lease_id != stale.lease_id


async def test_a_new_spec_or_a_smaller_count_retires_warm_adapters(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 2))
    old = await wait_warm(stub, 2, guard)
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 1, args=("7",)))  # same pool, new spec
    await wait_until(lambda: all(gone(p) for x in old for p in procs_of(x, guard)), 10.0, "old spec reaped")
    (new,) = await wait_warm(stub, 1, guard)
    taken = await stub.EnsureSession(take(scripts.echo, "agent:w:acp:1", tmp_path, args=("7",)))
    assert taken.warm and taken.lease.lease_id == new.lease_id
    (refill,) = await wait_warm(stub, 1, guard)
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 0, args=("7",)))
    await wait_until(lambda: all(gone(p) for p in procs_of(refill, guard)), 10.0, "emptied pool reaped")
    assert await warm_leases(stub) == []
    assert await state_of(stub, new.lease_id) == pb.LEASE_STATE_OPEN  # taken: not the pool's


async def test_keep_warm_refuses_bad_requests(
        tmp_path: Path, scripts: Scripts, served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    for bad in (keep_request(command=sys.executable, count=1),
                keep_request(pool=POOL, command=sys.executable, count=-1),
                keep_request(pool=POOL, command=sys.executable, count=10_000),
                keep_request(pool=POOL, command=sys.executable, cwd=str(tmp_path / "no"))):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.KeepWarm(bad)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # No launch spec, or one the session service did not seal: nothing is ever spawned.
    for unsealed in (keep_request(pool=POOL, count=1),
                     keep_request(b"another install's key", pool=POOL, command=sys.executable,
                                  count=1)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.KeepWarm(unsealed)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_dying_warm_adapter_makes_the_pool_back_off(
        tmp_path: Path, guard: ProcessGuard, served: tuple[RunningServer, Stub],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm, "BACKOFF_SECS", 0.2)
    _, stub = served
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nsys.exit(3)\n")
    await stub.KeepWarm(keep(crash, tmp_path, 1))
    await asyncio.sleep(2.0)
    leases = (await stub.ListLeases(pb.ListLeasesRequest(session_key=f"{POOL}:warm"))).leases
    # Backoff 0.2, 0.4, 0.8 s: a handful of tries, not a spawn loop.
    assert 2 <= len(leases) <= 6, [x.state for x in leases]
    await stub.KeepWarm(keep(crash, tmp_path, 0))


async def test_service_stop_closes_warm_adapters(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    channel = server.dial()
    try:
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        await stub.KeepWarm(keep(scripts.echo, tmp_path, 2))
        leases = await wait_warm(stub, 2, guard)
    finally:
        await channel.close(None)
        await server.stop()
    assert all(gone(p) for x in leases for p in procs_of(x, guard))
    controller = await open_controller(cfg)
    try:
        states = {x.state for x in await controller.store.list()}
        assert states == {LeaseState.CLOSED}
    finally:
        await controller.store.close()


async def test_startup_reap_covers_warm_leases_of_an_earlier_run(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    """An earlier run that vanished without closing (its adapters still alive): the
    next run on the same state dir verifies and reaps its warm leases before serving."""
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    earlier = await open_controller(cfg)
    try:
        await earlier.pools.keep(pool_spec.PoolSpec(POOL, sys.executable, (str(scripts.tree), str(tmp_path / "p.json"), "obey"),
                                               cwd=str(tmp_path), count=1))
        await wait_until(lambda: bool(earlier.pools.pools[POOL].ready), 20.0, "warm adapter")
        await earlier.pools.stop()  # the run is gone: no close, its tree lives on
        assert earlier.slot is not None
        earlier.slot.release()  # and its slot's lock with it, as the kernel drops a dead run's
        (lease,) = await earlier.store.list(states=[LeaseState.WARM])
        procs = [guard.track(lease.root_pid), guard.track(lease.adapter_pid)]
        server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/next.sock")
        try:
            await wait_until(lambda: all(gone(p) for p in procs), 5.0, "earlier warm tree reaped")
            assert (await earlier.store.get(lease.lease_id)).state == LeaseState.CLOSED  # type: ignore[union-attr]
        finally:
            await server.stop()
    finally:
        await earlier.close_all()
        await earlier.store.close()


async def test_kill_9_of_the_service_leaves_no_warm_adapter(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg_dir = tmp_path / "gw"
    cfg = make_config(cfg_dir, term_grace_ms=300)
    service = await start_service_process(cfg_dir, tmp_path / "service.log")
    guard.track(service.pid)
    address = f"unix:{cfg.data_dir}/run/lifecycle.sock"
    channel = service_channel(address)
    try:
        await wait_healthy(channel, within=20.0)
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        await stub.KeepWarm(keep(scripts.echo, tmp_path, 2))
        leases = await wait_warm(stub, 2, guard)
    finally:
        await channel.close(None)
    service.send_signal(signal.SIGKILL)
    await service.wait()
    procs = [p for x in leases for p in procs_of(x, guard)]
    await wait_until(lambda: all(gone(p) for p in procs), 3.0, "warm adapters gone after kill -9")
    # The next run settles the rows the killed one left warm.
    second = await start_service_process(cfg_dir, tmp_path / "second.log")
    guard.track(second.pid)
    channel = service_channel(address)
    try:
        await wait_healthy(channel, within=20.0)
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        assert await warm_leases(stub) == []
        for lease in leases:
            assert await state_of(stub, lease.lease_id) in (pb.LEASE_STATE_LOST, pb.LEASE_STATE_CLOSED)
    finally:
        await channel.close(None)
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 15.0) == 0
