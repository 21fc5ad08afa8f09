"""The lifecycle service over real gRPC on a unix socket: health, reflection, every RPC,
and the Attach semantics the edge relies on (first response, batching, exit,
one attacher at a time, re-attach, close_stdin, buffering with backpressure)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.grpc_server import RunningServer
from services.lifecycle.api.server import SERVICE_NAME, open_controller, start_lifecycle_server
from services.lifecycle.attach.channel import DEFAULT_MAX_BUFFER_BYTES, EXIT_DRAIN_SECS
from services.lifecycle.controller import EnsureRequest
from tests.launches import ensure_request
from tests.lifecycle.conftest import (
    STREAM_EOF,
    Attacher,
    ProcessGuard,
    Scripts,
    gone,
    make_config,
    wait_until,
)

Served = tuple[RunningServer, "lifecycle_pb2_grpc.LifecycleServiceAsyncStub"]


async def spawn(served: Served, guard: ProcessGuard, script: Path, *args: str, key: str = "agent:e:acp:1", **kw: Any) -> pb.EnsureSessionResponse:
    server, stub = served
    resp = await stub.EnsureSession(ensure_request(server, session_key=key, command=sys.executable, args=[str(script), *args], **kw))
    guard.track(resp.lease.root_pid)
    guard.track(resp.lease.adapter_pid)
    return resp


async def test_health_reflection_and_echo_round_trip(tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, lifecycle_pb2_grpc.LifecycleServiceAsyncStub]) -> None:
    server, stub = served
    assert server.address == f"unix:{tmp_path}/lifecycle.sock"
    channel = server.dial()
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE_NAME):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = [s.name async for r in call for s in r.list_services_response.service]
        assert SERVICE_NAME in names and "grpc.health.v1.Health" in names
    finally:
        await channel.close(None)

    instance = await stub.GetInstance(pb.GetInstanceRequest())
    assert instance.gateway_instance_id.startswith("gw-")
    assert instance.state_dir == str(tmp_path / "gw" / "data" / "lifecycle")
    assert instance.wrapper_root.startswith(instance.state_dir)

    resp = await spawn(served, guard, scripts.echo)
    lease = resp.lease
    assert resp.spawned and lease.state == pb.LEASE_STATE_OPEN
    assert lease.gateway_instance_id == instance.gateway_instance_id
    assert lease.wrapper_path.startswith(instance.wrapper_root + "/")
    assert lease.root_pid > 0 and lease.root_start_time > 0 and lease.adapter_pid > 0
    procs = [psutil.Process(lease.root_pid), psutil.Process(lease.adapter_pid)]

    att = Attacher(stub, lease.lease_id)
    first = await att.read()
    assert first.WhichOneof("msg") == "attached" and first.attached.lease_id == lease.lease_id
    att.send('{"jsonrpc":"2.0","id":1,"method":"initialize"}', "second line")
    assert await att.read_lines(2) == ['{"jsonrpc":"2.0","id":1,"method":"initialize"}', "second line"]

    closed = await stub.CloseSession(pb.CloseSessionRequest(lease_id=lease.lease_id, reason="close"))
    assert closed.unverified_reason == ""
    assert set(closed.terminated_pids) == {lease.root_pid, lease.adapter_pid}
    assert closed.lease.state == pb.LEASE_STATE_CLOSED and closed.lease.ended_at > 0
    last = await att.read()
    assert last.WhichOneof("msg") == "exit"
    assert last.exit.signal == 15 and last.exit.exit_code == -1
    assert await att.call.read() is STREAM_EOF
    assert all(gone(p) for p in procs), "no process may be left"


async def test_attach_semantics(tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, lifecycle_pb2_grpc.LifecycleServiceAsyncStub]) -> None:
    _, stub = served
    work = tmp_path / "work"
    work.mkdir()
    resp = await spawn(served, guard, scripts.chatty, cwd=str(work), env={"EXTRA_VAR": "x1"})
    lease = resp.lease

    # Idempotent for a live lease.
    again = await stub.EnsureSession(ensure_request(served[0], session_key="agent:e:acp:1", command=sys.executable, args=["ignored"]))
    assert not again.spawned and again.lease.lease_id == lease.lease_id

    # Output produced before anyone attached is buffered, not lost.
    first = Attacher(stub, lease.lease_id)
    assert (await first.read()).WhichOneof("msg") == "attached"
    hello = json.loads((await first.read_lines(1))[0])
    assert hello["env"] == {
        "ACPGATE_LEASE_ID": lease.lease_id,
        "ACPGATE_GATEWAY_INSTANCE_ID": lease.gateway_instance_id,
        "EXTRA_VAR": "x1",
    }
    assert hello["cwd"] == str(work)
    assert hello["pid"] == lease.adapter_pid == hello["pgid"] == lease.process_group_id

    # A second attacher is refused while the first is connected.
    second = Attacher(stub, lease.lease_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await second.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    # Batching: many lines sent in one message come back in few messages.
    first.send(*[f"line {i}" for i in range(200)])
    got: list[str] = []
    messages = 0
    while len(got) < 200:
        msg = await first.read()
        messages += 1
        got.extend(msg.stdout.lines)
    assert got == [f"line {i}" for i in range(200)]
    assert messages < 200

    # Lines far longer than the pipe reader's buffer pass through intact.
    big = "{" + "y" * (3 * 1024 * 1024) + "}"
    first.send(big, "after big")
    assert await first.read_lines(2) == [big, "after big"]

    # The first attacher leaves; a later attacher gets in and continues.
    first.call.cancel()
    await asyncio.sleep(0)
    third: Attacher | None = None

    async def try_attach() -> bool:
        nonlocal third
        candidate = Attacher(stub, lease.lease_id)
        try:
            msg = await candidate.read()
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
            return False
        assert msg.WhichOneof("msg") == "attached"
        third = candidate
        return True

    deadline = asyncio.get_running_loop().time() + 5
    while not await try_attach():
        assert asyncio.get_running_loop().time() < deadline, "re-attach never allowed"
        await asyncio.sleep(0.02)
    assert third is not None
    third.send("after re-attach")
    assert await third.read_lines(1) == ["after re-attach"]

    # close_stdin: the adapter sees EOF and exits on its own; the stream ends with its exit.
    third.close_stdin()
    last = await third.read()
    assert last.WhichOneof("msg") == "exit" and last.exit.exit_code == 0 and last.exit.signal == 0
    assert await third.call.read() is STREAM_EOF

    # A lease whose adapter died is settled and replaced on the next EnsureSession.
    replaced = await spawn(served, guard, scripts.echo)
    assert replaced.spawned and replaced.lease.lease_id != lease.lease_id
    old = (await stub.ListLeases(pb.ListLeasesRequest(session_key="agent:e:acp:1"))).leases
    states = {x.lease_id: x.state for x in old}
    assert states[lease.lease_id] == pb.LEASE_STATE_LOST
    assert states[replaced.lease.lease_id] == pb.LEASE_STATE_OPEN
    exited = next(x for x in old if x.lease_id == lease.lease_id)
    assert exited.HasField("exit_code") and exited.exit_code == 0

    # Attaching to a lease that is no longer open is refused.
    late = Attacher(stub, lease.lease_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await late.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_exit_code_and_stderr_tail(scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, lifecycle_pb2_grpc.LifecycleServiceAsyncStub]) -> None:
    _, stub = served
    resp = await spawn(served, guard, scripts.echo, "3")
    att = Attacher(stub, resp.lease.lease_id)
    assert (await att.read()).WhichOneof("msg") == "attached"
    att.send("last words")
    att.close_stdin()
    assert await att.read_lines(1) == ["last words"]
    last = await att.read()
    assert last.exit.exit_code == 3 and last.exit.signal == 0
    assert "stdin closed, bye" in last.exit.stderr_tail
    closed = await stub.CloseSession(pb.CloseSessionRequest(session_key="agent:e:acp:1"))
    assert closed.lease.state == pb.LEASE_STATE_LOST and closed.lease.exit_code == 3
    assert list(closed.terminated_pids) == []


async def test_errors_are_clear(tmp_path: Path, scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, lifecycle_pb2_grpc.LifecycleServiceAsyncStub]) -> None:
    _, stub = served

    async def code_of(coro: object) -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await coro  # type: ignore[misc]
        return err.value.code()

    server = served[0]
    # No launch at all: refused before anything else (only sealed specs ever run).
    assert await code_of(stub.EnsureSession(pb.EnsureSessionRequest(session_key="k"))) == grpc.StatusCode.PERMISSION_DENIED
    assert await code_of(stub.EnsureSession(ensure_request(server, command="x"))) == grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(stub.EnsureSession(ensure_request(server, session_key="k", command="x", cwd=str(tmp_path / "nope")))) == grpc.StatusCode.INVALID_ARGUMENT
    missing = str(tmp_path / "no-such-adapter")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.EnsureSession(ensure_request(server, session_key="k", command=missing))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "no-such-adapter" in (err.value.details() or "")
    failed = (await stub.ListLeases(pb.ListLeasesRequest(session_key="k"))).leases
    assert len(failed) == 1 and failed[0].state in (pb.LEASE_STATE_LOST, pb.LEASE_STATE_CLOSED)
    guard.track(failed[0].root_pid) if failed[0].root_pid and psutil.pid_exists(failed[0].root_pid) else None

    assert await code_of(stub.CloseSession(pb.CloseSessionRequest(lease_id="nope"))) == grpc.StatusCode.NOT_FOUND
    assert await code_of(stub.CloseSession(pb.CloseSessionRequest(session_key="nobody"))) == grpc.StatusCode.NOT_FOUND
    assert await code_of(stub.CloseSession(pb.CloseSessionRequest())) == grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id="nope"))) == grpc.StatusCode.NOT_FOUND

    unknown = Attacher(stub, "nope")
    assert await code_of(unknown.read()) == grpc.StatusCode.NOT_FOUND
    bad_first = stub.Attach(iter([pb.AttachRequest(close_stdin=True)]))
    assert await code_of(bad_first.read()) == grpc.StatusCode.INVALID_ARGUMENT

    # The service keeps serving after all of that.
    resp = await spawn(served, guard, scripts.echo, key="k2")
    v = await stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id=resp.lease.lease_id))
    assert v.verified and [p.depth for p in v.processes] == [1, 0]
    assert [p.pid for p in v.processes] == [resp.lease.adapter_pid, resp.lease.root_pid]
    listed = await stub.ListLeases(pb.ListLeasesRequest(state=pb.LEASE_STATE_OPEN))
    assert [x.lease_id for x in listed.leases] == [resp.lease.lease_id]


async def test_stop_closes_every_held_lease(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        leases = [(await spawn((server, stub), guard, scripts.echo, key=f"agent:e:acp:{i}")).lease for i in range(2)]
    finally:
        await channel.close(None)
    procs = [guard.procs[pid] for lease in leases for pid in (lease.root_pid, lease.adapter_pid)]
    await server.stop()
    assert all(gone(p) for p in procs)
    assert not await asyncio.to_thread(Path(f"{tmp_path}/l.sock").exists)


async def test_stdout_backpressure_without_attacher(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    controller = await open_controller(cfg)
    done = tmp_path / "flood.done"
    count = (3 * DEFAULT_MAX_BUFFER_BYTES) // 1000  # three buffers' worth of 1 kB lines
    try:
        lease, spawned, _ = await controller.ensure_session(
            EnsureRequest("agent:f:acp:1", sys.executable, (str(scripts.flood), str(count), str(done)))
        )
        assert spawned
        guard.track(lease.root_pid)
        guard.track(lease.adapter_pid)
        channel = controller.channel(lease.lease_id)
        assert channel is not None
        await wait_until(lambda: channel.buffered_bytes >= DEFAULT_MAX_BUFFER_BYTES, 20.0, "buffer full")
        # The service stopped reading: the adapter is stuck writing, memory stays bounded.
        assert not done.exists()
        assert channel.buffered_bytes < DEFAULT_MAX_BUFFER_BYTES + 2000
        with channel.attach():
            received = 0
            while received < count:
                batch = await asyncio.wait_for(channel.next_batch(), 10.0)
                assert batch is not None
                assert batch[0].startswith(f"{received:08d} ")
                received += len(batch)
        await wait_until(done.exists, 10.0, "flood finished once drained")
        assert received == count
    finally:
        await controller.close_all()
        await controller.store.close()


async def test_output_waiting_for_an_attacher_survives_the_adapters_exit(tmp_path: Path, scripts: Scripts, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    controller = await open_controller(cfg)
    done = tmp_path / "flood.done"
    # Fills the channel buffer and leaves some lines in the pipe, then exits.
    count = DEFAULT_MAX_BUFFER_BYTES // 1009 + 60
    try:
        lease, *_ = await controller.ensure_session(
            EnsureRequest("agent:f:acp:2", sys.executable, (str(scripts.flood), str(count), str(done), "exit"))
        )
        guard.track(lease.root_pid)
        channel = controller.channel(lease.lease_id)
        assert channel is not None
        await wait_until(lambda: not channel.running, 20.0, "adapter exit known")
        # Longer than the exit drain window: the unread pipe must still not be dropped.
        await asyncio.sleep(EXIT_DRAIN_SECS + 0.3)
        assert not channel.finished.is_set()
        received: list[str] = []
        with channel.attach():
            while (batch := await asyncio.wait_for(channel.next_batch(), 10.0)) is not None:
                received.extend(batch)
        assert len(received) == count and received[-1].startswith(f"{count - 1:08d} ")
        assert channel.exit_info is not None and channel.exit_info.exit_code == 0
    finally:
        await controller.close_all()
        await controller.store.close()


async def test_concurrent_ensure_for_one_key_spawns_once(scripts: Scripts, guard: ProcessGuard, served: tuple[RunningServer, lifecycle_pb2_grpc.LifecycleServiceAsyncStub]) -> None:
    _, stub = served
    req = ensure_request(served[0], session_key="agent:c:acp:1", command=sys.executable, args=[str(scripts.echo)])
    replies = await asyncio.gather(*(stub.EnsureSession(req) for _ in range(4)))
    for r in replies:
        guard.track(r.lease.root_pid)
    assert sum(r.spawned for r in replies) == 1
    assert len({r.lease.lease_id for r in replies}) == 1
    listed = await stub.ListLeases(pb.ListLeasesRequest(session_key="agent:c:acp:1"))
    assert len(listed.leases) == 1
