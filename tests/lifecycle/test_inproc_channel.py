"""The in-process channel with the real lifecycle servicer and real adapter processes.

The generated stub on an :class:`InProcessChannel` behaves as over a socket:
unary answers, ``context.abort`` as ``AioRpcError`` with its code and details,
``Attach`` streams with batches, an ended stream as EOF, ``cancel()`` freeing
the attacher slot, and the service's own interceptors around every call.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.inproc import InProcessChannel
from services.lifecycle.api.server import open_controller
from services.lifecycle.api.servicer import LifecycleServicer
from tests.launches import TEST_SECURITY, ensure_request
from tests.lifecycle.conftest import ProcessGuard, Scripts, make_config

pytestmark = pytest.mark.slow


class Counting(grpc.aio.ServerInterceptor):
    """Records the method of every call it sees."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        self.methods.append(handler_call_details.method)
        return await continuation(handler_call_details)


@pytest.fixture
async def wired(tmp_path: Path) -> AsyncIterator[tuple[Any, Counting]]:
    controller = await open_controller(make_config(tmp_path / "gw", term_grace_ms=300))
    counting = Counting()
    channel = InProcessChannel([counting])
    lifecycle_pb2_grpc.add_LifecycleServiceServicer_to_server(LifecycleServicer(controller, seal_key=TEST_SECURITY.seal_key), channel)  # type: ignore[arg-type]
    try:
        yield lifecycle_pb2_grpc.LifecycleServiceStub(channel), counting  # type: ignore[arg-type]
    finally:
        await controller.close_all()
        await controller.store.close()


async def _echo_lease(stub: Any, scripts: Scripts, guard: ProcessGuard, key: str) -> str:
    """A live echo adapter's lease id."""
    resp = await stub.EnsureSession(ensure_request(
        session_key=key, command=sys.executable, args=[str(scripts.echo)]))
    guard.track(resp.lease.root_pid)
    return str(resp.lease.lease_id)


async def test_unary_calls_and_aborts(wired: tuple[Any, Counting]) -> None:
    stub, counting = wired
    instance = await stub.GetInstance(pb.GetInstanceRequest())
    assert instance.gateway_instance_id
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.CloseSession(pb.CloseSessionRequest(lease_id="nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in (err.value.details() or "")
    assert counting.methods == ["/acpgate.lifecycle.v1.LifecycleService/GetInstance",
                                "/acpgate.lifecycle.v1.LifecycleService/CloseSession"]


async def test_attach_streams_and_cancel_frees_the_slot(
        wired: tuple[Any, Counting], scripts: Scripts, guard: ProcessGuard) -> None:
    stub, _ = wired
    lease_id = await _echo_lease(stub, scripts, guard, "agent:i:acp:1")
    queue: asyncio.Queue[pb.AttachRequest] = asyncio.Queue()

    async def requests() -> AsyncIterator[pb.AttachRequest]:
        yield pb.AttachRequest(open=pb.AttachOpen(lease_id=lease_id))
        while True:
            yield await queue.get()

    call = stub.Attach(requests())
    assert (await call.read()).attached.lease_id == lease_id
    queue.put_nowait(pb.AttachRequest(stdin=pb.Lines(lines=["a", "b"])))
    seen: list[str] = []
    while len(seen) < 2:
        seen += list((await asyncio.wait_for(call.read(), 10)).stdout.lines)
    assert seen == ["a", "b"]
    # A second attacher is refused while the first holds the slot...
    busy = stub.Attach(iter([pb.AttachRequest(open=pb.AttachOpen(lease_id=lease_id))]))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await busy.read()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # ...and admitted once the first cancelled.
    assert call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call.read()
    again = stub.Attach(iter([pb.AttachRequest(open=pb.AttachOpen(lease_id=lease_id)),
                              pb.AttachRequest(close_stdin=True)]))
    first = await asyncio.wait_for(again.read(), 10)
    assert first.attached.lease_id == lease_id
    messages = [m async for m in again]  # the adapter exits on EOF: then the stream ends
    assert messages[-1].WhichOneof("msg") == "exit" and messages[-1].exit.exit_code == 0
    assert await again.read() is grpc.aio.EOF  # type: ignore[attr-defined]


async def test_cancel_during_a_pending_read_stops_the_servicer_there(
        wired: tuple[Any, Counting], scripts: Scripts, guard: ProcessGuard) -> None:
    # The servicer's generator runs inside the caller's read: a cancel() while that read
    # waits (the adapter is silent) ends the read with CancelledError, runs the servicer's
    # cleanup (the slot is free again), and leaves the reading task itself not cancelled.
    stub, _ = wired
    lease_id = await _echo_lease(stub, scripts, guard, "agent:i:acp:2")
    never: asyncio.Event = asyncio.Event()

    async def requests() -> AsyncIterator[pb.AttachRequest]:
        yield pb.AttachRequest(open=pb.AttachOpen(lease_id=lease_id))
        await never.wait()
        yield pb.AttachRequest(close_stdin=True)

    call = stub.Attach(requests())
    assert (await call.read()).attached.lease_id == lease_id

    async def reader() -> str:
        try:
            await call.read()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None and not task.cancelling()
            return "cancelled"
        return "read"

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.05)  # the read now waits inside the servicer for stdout
    assert call.cancel()
    assert await asyncio.wait_for(task, 5) == "cancelled"
    assert not call.cancel()  # already ended
    again = stub.Attach(iter([pb.AttachRequest(open=pb.AttachOpen(lease_id=lease_id)),
                              pb.AttachRequest(close_stdin=True)]))
    assert (await asyncio.wait_for(again.read(), 10)).attached.lease_id == lease_id
    messages = [m async for m in again]
    assert messages[-1].WhichOneof("msg") == "exit"
