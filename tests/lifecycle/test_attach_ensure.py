"""Attach opened with ``ensure`` (lifecycle proto ``AttachOpen.ensure``).

One stream ensures the session's lease exactly as EnsureSession does — the live
lease of the key, a warm adapter of the named pool, or a spawn — and attaches
to it, so a session comes up in one round trip to the lifecycle service
instead of two. Its first response is ``ensured``; a refusal ends the stream
with EnsureSession's status. ``warm_only`` never spawns. A lease the stream
spawned or took lives as long as the stream: an adapter taken warm and touched
by nobody goes back to its pool (warm again, the same processes) unless the
pool is full or its files changed; any other is closed — also when the
attacher went away before the ensure ended. Real processes and a real gRPC
server throughout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.grpc_server import RunningServer
from services.lifecycle.adapters import warm
from services.lifecycle.api.server import open_controller
from services.lifecycle.api.servicer import LifecycleServicer
from services.lifecycle.controller import Ensured, EnsureRequest, LifecycleController
from services.lifecycle.leases.store import LeaseState
from tests.launches import TEST_SECURITY, ensure_request
from tests.lifecycle.conftest import (
    Attacher,
    ProcessGuard,
    Scripts,
    gone,
    make_config,
    wait_until,
    wait_until_async,
)
from tests.lifecycle.test_warm_pool import keep, procs_of, state_of, take, wait_warm, warm_leases

pytestmark = pytest.mark.slow

Stub = lifecycle_pb2_grpc.LifecycleServiceStub


def ensure(script: Path, key: str, cwd: Path) -> pb.EnsureSessionRequest:
    """A cold EnsureSession of ``script`` for ``key`` (no pool)."""
    return ensure_request(session_key=key, command=sys.executable,
                                   args=[str(script)], cwd=str(cwd))


async def leases_of(stub: Stub, key: str) -> list[pb.Lease]:
    return list((await stub.ListLeases(pb.ListLeasesRequest(session_key=key))).leases)


async def test_a_warm_adapter_is_taken_and_attached_in_one_stream(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    await stub.KeepWarm(keep(scripts.chatty, pool_dir, 1))
    (waiting,) = await wait_warm(stub, 1, guard)
    att = Attacher(stub, ensure=take(scripts.chatty, "agent:w:acp:1", tmp_path))
    first = await att.read()
    assert first.WhichOneof("msg") == "ensured"
    assert first.ensured.warm and first.ensured.spawned
    lease = first.ensured.lease
    assert lease.lease_id == waiting.lease_id
    assert (lease.state, lease.session_key) == (pb.LEASE_STATE_OPEN, "agent:w:acp:1")
    hello = json.loads((await att.read_lines(1))[0])  # the same stream, attached
    assert hello["env"]["ACPGATE_LEASE_ID"] == waiting.lease_id
    att.send("ping")
    assert await att.read_lines(1) == ["ping"]
    (refill,) = await wait_warm(stub, 1, guard)  # the pool refills as after EnsureSession
    assert refill.lease_id != waiting.lease_id


async def test_without_a_pool_it_spawns_and_the_lease_lives_as_long_as_the_stream(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    first = Attacher(stub, ensure=ensure(scripts.echo, "agent:e:acp:1", tmp_path))
    got = (await first.read()).ensured
    assert got.spawned and not got.warm
    procs = [guard.track(got.lease.root_pid), guard.track(got.lease.adapter_pid)]
    first.send("one")
    assert await first.read_lines(1) == ["one"]
    # The lease is the stream's: another ensure of the key is never handed it while the
    # stream holds it (it would be closed under it when the stream ends): that
    # ensure waits for the stream's let-go (tests/e2e/test_early_take.py pins the order).
    second = Attacher(stub, ensure=ensure(scripts.echo, "agent:e:acp:1", tmp_path))
    waiting = asyncio.ensure_future(second.read())
    first.send("two")
    assert await first.read_lines(1) == ["two"]
    first.call.cancel()  # the stream that spawned it ends: the lease goes with it

    async def closed() -> bool:
        return await state_of(stub, got.lease.lease_id) == pb.LEASE_STATE_CLOSED
    await wait_until_async(closed, 10.0, "the stream's lease closed")
    await wait_until(lambda: all(gone(p) for p in procs), 10.0, "its processes reaped")
    again = (await waiting).ensured
    assert again.spawned and again.lease.lease_id != got.lease.lease_id
    guard.track(again.lease.root_pid)
    second.send("three")
    assert await second.read_lines(1) == ["three"]


@pytest.mark.parametrize(("key", "command", "code"), [
    ("", sys.executable, grpc.StatusCode.INVALID_ARGUMENT),
    ("agent:x:acp:1", "", grpc.StatusCode.PERMISSION_DENIED),  # no sealed launch spec
    ("agent:x:acp:2", "/nonexistent/adapter", grpc.StatusCode.UNAVAILABLE),
])
async def test_a_refused_ensure_ends_the_stream_as_ensure_session_would(
        tmp_path: Path, served: tuple[RunningServer, Stub], key: str, command: str,
        code: grpc.StatusCode) -> None:
    _, stub = served
    request = ensure_request(session_key=key, command=command, cwd=str(tmp_path))
    with pytest.raises(grpc.aio.AioRpcError) as direct:
        await stub.EnsureSession(request)
    with pytest.raises(grpc.aio.AioRpcError) as attached:
        await Attacher(stub, ensure=request).read()
    assert (attached.value.code(), attached.value.details()) == (
        direct.value.code(), direct.value.details())
    assert direct.value.code() == code
    if key:  # nothing left open (a spawn that failed ends its lease, lost or closed)
        ended = (pb.LEASE_STATE_LOST, pb.LEASE_STATE_CLOSED)
        assert all(x.state in ended for x in await leases_of(stub, key))


async def test_an_open_naming_neither_a_lease_nor_an_ensure_is_refused(
        served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await Attacher(stub).read()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "open{lease_id} or open{ensure}" in (refused.value.details() or "")


class _Context:
    """The handler's context on the paths exercised here (no refusal: never used)."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:  # pragma: no cover
        raise AssertionError(f"unexpected abort {code}: {details}")


async def _one_open(request: pb.AttachRequest) -> AsyncIterator[pb.AttachRequest]:
    yield request
    await asyncio.Event().wait()  # the attacher says nothing more


async def test_a_lease_ensured_for_an_attacher_that_went_away_is_closed(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The attacher goes away while the ensure runs (the edge gave up on a session/new):
    the ensure finishes — a spawn is never stopped half-way — and its lease is closed,
    its processes reaped. Driven through the servicer's handler, so the cancellation has
    certainly reached it before the ensure ends."""
    controller = await open_controller(make_config(tmp_path / "gw", term_grace_ms=300))
    spawned = asyncio.Event()
    release = asyncio.Event()
    real = LifecycleController.ensure_session

    async def gated(self: LifecycleController, req: EnsureRequest, *,
                    hold: bool = False) -> Ensured:
        ensured = await real(self, req, hold=hold)
        guard.track(ensured.lease.root_pid)
        guard.track(ensured.lease.adapter_pid)
        spawned.set()
        await release.wait()
        return ensured

    monkeypatch.setattr(LifecycleController, "ensure_session", gated)
    servicer = LifecycleServicer(controller, seal_key=TEST_SECURITY.seal_key)
    opened = pb.AttachRequest(open=pb.AttachOpen(
        ensure=ensure(scripts.echo, "agent:e:acp:gone", tmp_path)))
    context: Any = _Context()
    stream = servicer.Attach(_one_open(opened), context)
    try:
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.wait_for(spawned.wait(), 20.0)
        first.cancel()  # what grpc does to the handler when its client cancels
        with pytest.raises(asyncio.CancelledError):
            await first
        (lease,) = await controller.list_leases(session_key="agent:e:acp:gone")
        assert lease.state == LeaseState.OPEN  # the ensure has not ended yet
        procs = [guard.procs[lease.root_pid], guard.procs[lease.adapter_pid]]
        release.set()

        async def closed() -> bool:
            (now,) = await controller.list_leases(session_key="agent:e:acp:gone")
            return now.state == LeaseState.CLOSED
        await wait_until_async(closed, 20.0, "the abandoned lease closed")
        await wait_until(lambda: all(gone(p) for p in procs), 10.0, "its processes reaped")
    finally:
        await controller.close_all()
        await controller.store.close()


def warm_only(script: Path, key: str) -> pb.EnsureSessionRequest:
    """A take of the pool that may not spawn (the edge's, before the cwd is decided)."""
    request = take(script, key, Path("/"))
    request.cwd, request.warm_only = "", True
    return request


async def test_warm_only_never_spawns(tmp_path: Path, scripts: Scripts,
                                      served: tuple[RunningServer, Stub]) -> None:
    _, stub = served
    for request in (warm_only(scripts.echo, "agent:w:acp:1"),  # no such pool yet
                    ensure_request(session_key="agent:w:acp:1", command=sys.executable,
                                            args=[str(scripts.echo)], warm_only=True)):
        with pytest.raises(grpc.aio.AioRpcError) as direct:
            await stub.EnsureSession(request)
        assert direct.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no warm adapter" in (direct.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as attached:
            await Attacher(stub, ensure=request).read()
        assert attached.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert not (await stub.ListLeases(pb.ListLeasesRequest())).leases


@pytest.fixture
def no_refill(monkeypatch: pytest.MonkeyPatch) -> None:
    """No refill lands while a test runs (a full pool takes nothing back)."""
    monkeypatch.setattr(warm, "REFILL_DELAY_SECS", 60.0)
    monkeypatch.setattr(warm, "REFILL_MAX_DELAY_SECS", 60.0)


async def take_the_warm_one(stub: Stub, scripts: Scripts, guard: ProcessGuard,
                            cwd: Path) -> tuple[pb.Lease, Attacher]:
    """A pool of one echo adapter, and an ``Attach{ensure warm_only}`` that took it."""
    await stub.KeepWarm(keep(scripts.echo, cwd, 1))
    (ready,) = await wait_warm(stub, 1, guard)
    att = Attacher(stub, ensure=warm_only(scripts.echo, "agent:w:acp:1"))
    got = (await att.read()).ensured
    assert got.warm and got.lease.lease_id == ready.lease_id
    assert await state_of(stub, ready.lease_id) == pb.LEASE_STATE_OPEN
    return ready, att


async def test_an_untouched_warm_adapter_goes_back_to_its_pool(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        served: tuple[RunningServer, Stub], no_refill: None) -> None:
    _, stub = served
    ready, att = await take_the_warm_one(stub, scripts, guard, tmp_path)
    att.call.cancel()  # gone without a line either way
    (back,) = await wait_warm(stub, 1, guard)
    assert back.lease_id == ready.lease_id and back.session_key == "agent:w:warm"
    assert not any(gone(p) for p in procs_of(ready, guard))  # the very same processes
    again = await stub.EnsureSession(take(scripts.echo, "agent:w:acp:2", tmp_path))
    assert again.warm and again.lease.lease_id == ready.lease_id
    used = Attacher(stub, again.lease.lease_id)
    assert (await used.read()).WhichOneof("msg") == "attached"
    used.send("hello")
    assert await used.read_lines(1) == ["hello"]


async def test_a_touched_adapter_is_closed_with_its_stream(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        served: tuple[RunningServer, Stub], no_refill: None) -> None:
    _, stub = served
    ready, att = await take_the_warm_one(stub, scripts, guard, tmp_path)
    att.send("initialize")
    assert await att.read_lines(1) == ["initialize"]
    att.call.cancel()  # it heard from a session: never another's

    async def closed() -> bool:
        return await state_of(stub, ready.lease_id) == pb.LEASE_STATE_CLOSED
    await wait_until_async(closed, 10.0, "the touched adapter closed")
    await wait_until(lambda: all(gone(p) for p in procs_of(ready, guard)), 10.0, "reaped")
    assert await warm_leases(stub) == []  # not back in the pool


@pytest.mark.parametrize("why", ["the pool refilled", "its files changed"])
async def test_an_untouched_adapter_the_pool_cannot_take_back_is_closed(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        served: tuple[RunningServer, Stub], request: pytest.FixtureRequest, why: str) -> None:
    if why == "its files changed":
        request.getfixturevalue("no_refill")
    _, stub = served
    config = tmp_path / "config.toml"
    config.write_text("a = 1\n")
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 1, watch=(config,)))
    (ready,) = await wait_warm(stub, 1, guard)
    att = Attacher(stub, ensure=warm_only(scripts.echo, "agent:w:acp:1"))
    assert (await att.read()).ensured.lease.lease_id == ready.lease_id
    if why == "the pool refilled":
        (refill,) = await wait_warm(stub, 1, guard)
        assert refill.lease_id != ready.lease_id
    else:
        config.write_text("a = 2\n")
    att.call.cancel()

    async def closed() -> bool:
        return await state_of(stub, ready.lease_id) == pb.LEASE_STATE_CLOSED
    await wait_until_async(closed, 10.0, "the untouched adapter closed")
    await wait_until(lambda: all(gone(p) for p in procs_of(ready, guard)), 10.0, "reaped")
