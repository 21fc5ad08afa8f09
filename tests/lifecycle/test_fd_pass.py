"""An attacher on this host takes the adapter's pipes (lifecycle ``AttachOpen.fd_pass``).

The first response of a stream opened with ``fd_pass`` carries a one-shot grant;
redeemed on the fd socket, it brings the adapter's stdin and stdout — and what the
service had read of stdout already, whole lines then the start of the next — and
from then on the stream carries only the exit (with its stderr tail). ``use_stream``
keeps the relay over the stream instead. The attacher slot, the let-go of a warm
adapter and the exit report behave as over the stream. Real processes, a real
gRPC server and its fd socket throughout.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.config import load_config
from services.common.grpc_server import RunningServer
from services.lifecycle.api.server import open_controller, start_lifecycle_server
from services.lifecycle.controller import EnsureRequest
from tests.launches import ensure_request, install_test_key
from tests.lifecycle.conftest import (
    Attacher,
    ProcessGuard,
    Scripts,
    gone,
    wait_until,
    wait_until_async,
)
from tests.lifecycle.fd_client import read_until, redeem
from tests.lifecycle.test_attach_ensure import no_refill, warm_only  # noqa: F401 (a fixture)
from tests.lifecycle.test_warm_pool import keep, procs_of, state_of, wait_warm

pytestmark = pytest.mark.slow

Stub = lifecycle_pb2_grpc.LifecycleServiceStub

#: Writes two lines and the start of a third, marks that, then echoes; "finish" ends the
#: third line. Exits 3 with a word on stderr once stdin closes.
PARTIAL = r"""
import sys
out = sys.stdout
out.write("one\ntwo\nthr")
out.flush()
open(sys.argv[1], "w").close()
for line in sys.stdin:
    line = line.rstrip("\n")
    out.write("ee\n" if line == "finish" else line + "\n")
    out.flush()
sys.stderr.write("partial adapter: stdin closed, bye\n")
sys.exit(3)
"""


def config_dir(root: Path, data_path: str = "auto") -> Path:
    """A config dir with a short grace and the tests' service key, on ``data_path``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text(
        f'[lifecycle]\nterm_grace_ms = 300\n\n[services]\ndata_path = "{data_path}"\n')
    install_test_key(load_config(root, environ={}))
    return root


@pytest.fixture
async def fd_served(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Any, str]]:
    """A lifecycle server with its fd socket (whatever the run's data path), a stub, and
    the fd socket's path."""
    cfg = load_config(config_dir(tmp_path / "gw"), environ={})
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/lifecycle.sock")
    channel = server.dial()
    try:
        yield server, lifecycle_pb2_grpc.LifecycleServiceStub(channel), f"{tmp_path}/lifecycle.fds.sock"
    finally:
        await channel.close(None)
        await server.stop()


def ensure(script: Path, key: str, cwd: Path, *args: str) -> pb.EnsureSessionRequest:
    return ensure_request(session_key=key, command=sys.executable,
                          args=[str(script), *args], cwd=str(cwd))


async def attach_when_free(stub: Stub, lease_id: str, *, fd_pass: bool) -> tuple[Attacher,
                                                                                  pb.AttachResponse]:
    """Attach to ``lease_id`` once the previous attacher's slot is free."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while True:
        att = Attacher(stub, lease_id, fd_pass=fd_pass)
        try:
            return att, await att.read()
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or loop.time() > deadline:
                raise
        await asyncio.sleep(0.02)


async def test_a_hand_over_gives_what_was_read_then_the_pipes(tmp_path: Path,
                                                               guard: ProcessGuard) -> None:
    script = tmp_path / "partial.py"
    script.write_text(PARTIAL)
    marker = tmp_path / "wrote"
    controller = await open_controller(load_config(config_dir(tmp_path / "gw"), environ={}))
    try:
        lease, *_ = await controller.ensure_session(EnsureRequest(
            "agent:p:acp:1", sys.executable, (str(script), str(marker))))
        guard.track(lease.root_pid)
        channel = controller.channel(lease.lease_id)
        assert channel is not None
        await wait_until(lambda: channel.buffered_bytes == len("onetwo"), 10.0, "lines read")
        assert channel.hand_over() is None  # nobody attached
        with channel.attach():
            handover = channel.hand_over()
            assert handover is not None
            try:
                assert (handover.stdout.lines, handover.stdout.partial) == (b"one\ntwo\n", b"thr")
                assert not handover.stdout.dropping and handover.stdout.too_long == 0
                assert channel.stdout.handed and channel.buffered_bytes == 0
                os.write(handover.stdin, b"finish\nping\n")
                got = await asyncio.to_thread(read_until, handover.stdout.fd, b"ping\n")
                assert got == b"ee\nping\n"  # the rest of the line, then what follows
                assert channel.buffered_bytes == 0  # not read here any more
                os.close(handover.stdin)
                await channel.close_stdin()  # the service's own copy: EOF for the adapter
                await asyncio.wait_for(channel.finished.wait(), 10.0)
            finally:
                handover.close()
        assert channel.exit_info is not None and channel.exit_info.exit_code == 3
        assert "stdin closed, bye" in channel.exit_info.stderr_tail
    finally:
        await controller.close_all()
        await controller.store.close()


async def test_an_attacher_takes_the_pipes_and_the_stream_carries_the_exit(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        fd_served: tuple[RunningServer, Stub, str]) -> None:
    _, stub, path = fd_served
    att = Attacher(stub, ensure=ensure(scripts.echo, "agent:f:acp:1", tmp_path, "7"),
                   fd_pass=True)
    first = await att.read()
    assert first.WhichOneof("msg") == "ensured" and first.HasField("fd_grant")
    lease = first.ensured.lease
    guard.track(lease.root_pid)
    answer = await redeem(path, first)
    assert answer.ok, answer.header
    stdin, stdout = answer.fds
    try:
        os.write(stdin, b"hello\nworld\n")
        assert await asyncio.to_thread(read_until, stdout, b"world\n") == b"hello\nworld\n"
    finally:
        os.close(stdin)
    att.close_stdin()  # the service's copy too: the adapter sees EOF and exits
    msg = await att.read()  # nothing came over the stream but the exit
    assert msg.WhichOneof("msg") == "exit", msg
    assert msg.exit.exit_code == 7 and "stdin closed, bye" in msg.exit.stderr_tail
    assert await asyncio.to_thread(read_until, stdout, b"\n") == b""  # and stdout ended
    os.close(stdout)


async def test_use_stream_relays_over_the_stream_and_voids_the_grant(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        fd_served: tuple[RunningServer, Stub, str]) -> None:
    _, stub, path = fd_served
    att = Attacher(stub, ensure=ensure(scripts.echo, "agent:f:acp:2", tmp_path), fd_pass=True)
    first = await att.read()
    guard.track(first.ensured.lease.root_pid)
    att.queue.put_nowait(pb.AttachRequest(use_stream=True))
    att.send("one")
    assert await att.read_lines(1) == ["one"]
    answer = await redeem(path, first)
    assert not answer.ok and answer.fds == [] and answer.header == {
        "v": 1, "ok": False, "error": "refused"}
    att.send("two")
    assert await att.read_lines(1) == ["two"]  # the stream goes on


async def test_one_attacher_at_a_time_and_each_grant_is_its_attachs_alone(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        fd_served: tuple[RunningServer, Stub, str]) -> None:
    _, stub, path = fd_served
    got = await stub.EnsureSession(ensure(scripts.echo, "agent:f:acp:3", tmp_path))
    lease_id = got.lease.lease_id
    guard.track(got.lease.root_pid)
    first_att, first = await attach_when_free(stub, lease_id, fd_pass=True)
    assert first.WhichOneof("msg") == "attached"
    taken = await redeem(path, first)
    assert taken.ok
    with pytest.raises(grpc.aio.AioRpcError) as busy:  # the pipes are out: still one attacher
        await Attacher(stub, lease_id, fd_pass=True).read()
    assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    replay = await redeem(path, first)
    assert not replay.ok and replay.fds == []
    first_att.call.cancel()
    taken.close()
    second_att, second = await attach_when_free(stub, lease_id, fd_pass=True)
    assert second.fd_grant.generation == first.fd_grant.generation + 1
    stale = await redeem(path, first)  # the first attach's grant is not the second's
    assert not stale.ok and stale.fds == []
    answer = await redeem(path, second)
    assert answer.ok
    stdin, stdout = answer.fds
    os.write(stdin, b"again\n")
    assert await asyncio.to_thread(read_until, stdout, b"again\n") == b"again\n"
    second_att.call.cancel()
    answer.close()
    # A later attacher over the stream reads the adapter again (its pipe read here again).
    third_att, third = await attach_when_free(stub, lease_id, fd_pass=False)
    assert not third.HasField("fd_grant")
    third_att.send("over the stream")
    assert await third_att.read_lines(1) == ["over the stream"]


@pytest.mark.usefixtures("no_refill")
@pytest.mark.parametrize("takes", [True, False])
async def test_a_warm_adapter_whose_pipes_were_taken_is_never_given_back(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        fd_served: tuple[RunningServer, Stub, str], takes: bool) -> None:
    _, stub, path = fd_served
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 1))
    (ready,) = await wait_warm(stub, 1, guard)
    att = Attacher(stub, ensure=warm_only(scripts.echo, "agent:w:acp:1"), fd_pass=True)
    first = await att.read()
    assert first.ensured.warm and first.HasField("fd_grant")
    if takes:
        answer = await redeem(path, first)  # taken, not a line written: still touched
        assert answer.ok
        answer.close()
    else:
        att.queue.put_nowait(pb.AttachRequest(use_stream=True))
        await asyncio.sleep(0)
    att.call.cancel()
    if takes:
        async def closed() -> bool:
            return await state_of(stub, ready.lease_id) == pb.LEASE_STATE_CLOSED
        await wait_until_async(closed, 10.0, "the taken adapter closed")
        await wait_until(lambda: all(gone(p) for p in procs_of(ready, guard)), 10.0, "reaped")
    else:
        (back,) = await wait_warm(stub, 1, guard)
        assert back.lease_id == ready.lease_id  # untouched: back in its pool


async def test_no_grant_once_the_exit_is_known(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        fd_served: tuple[RunningServer, Stub, str]) -> None:
    _, stub, _ = fd_served
    done = tmp_path / "flood.done"
    got = await stub.EnsureSession(ensure(scripts.flood, "agent:f:acp:4", tmp_path, "3",
                                          str(done), "exit"))
    guard.track(got.lease.root_pid)

    async def exited() -> bool:
        leases = (await stub.ListLeases(pb.ListLeasesRequest(session_key="agent:f:acp:4"))).leases
        return any(x.HasField("exit_code") for x in leases)
    await wait_until_async(exited, 10.0, "the adapter's exit recorded")
    att, first = await attach_when_free(stub, got.lease.lease_id, fd_pass=True)
    assert not first.HasField("fd_grant")  # its last lines and exit come over the stream
    lines = await att.read_lines(3)
    assert [line[:8] for line in lines] == ["00000000", "00000001", "00000002"]
    assert (await att.read()).WhichOneof("msg") == "exit"


async def test_data_path_grpc_serves_no_fd_socket(tmp_path: Path, scripts: Scripts,
                                                   guard: ProcessGuard) -> None:
    cfg = load_config(config_dir(tmp_path / "gw", "grpc"), environ={})
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/lifecycle.sock")
    channel = server.dial()
    try:
        assert not (tmp_path / "lifecycle.fds.sock").exists()
        stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        att = Attacher(stub, ensure=ensure(scripts.echo, "agent:g:acp:1", tmp_path), fd_pass=True)
        first = await att.read()
        guard.track(first.ensured.lease.root_pid)
        assert not first.HasField("fd_grant")
        att.send("relayed")
        assert await att.read_lines(1) == ["relayed"]
    finally:
        await channel.close(None)
        await server.stop()
    assert not (tmp_path / "lifecycle.fds.sock").exists()
