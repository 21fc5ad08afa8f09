"""A dropped early take never hands its adapter to the session's own ensure.

``session/new`` takes a warm adapter early, on a stream of its own
(``Attach{open.ensure{warm_only}}``), while the session service decides the
session; when the decision does not fit the ``initialize`` it sent ahead, the
edge drops that stream and at once ensures the session's lease again, for the
same session key. The lifecycle service lets the dropped stream's lease go in
the background — closed (the adapter heard that other ``initialize``), or back
in its pool (it heard nothing) — and until then the lease was still the key's
open lease: the second ensure was handed it, and the session's adapter was then
SIGTERMed under it (CI: ``Failed to start agent demo: agent process exited
(killed by signal 15)``), or attached while the first stream still was
(FAILED_PRECONDITION), or put back in the pool while it served the session.

Forced interleaving, against a real ``acpgate lifecycle-service`` process over
its unix socket with real adapters: the early stream takes the warm adapter,
the second ensure is sent and has reached the service (its log says it waits
for the let-go) before the early stream ends.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.grpc_channel import wait_healthy
from tests.launches import service_channel
from tests.lifecycle.conftest import (
    Attacher,
    ProcessGuard,
    Scripts,
    gone,
    guard,
    make_config,
    scripts,
    start_service_process,
    wait_until,
    wait_until_async,
)
from tests.lifecycle.test_attach_ensure import warm_only
from tests.lifecycle.test_warm_pool import closed, keep, procs_of, state_of, take, wait_warm

__all__ = ["guard", "scripts"]  # the shared fixtures: imported so that pytest finds them here

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

Stub = lifecycle_pb2_grpc.LifecycleServiceStub
KEY = "agent:w:acp:early-take"
#: What the lifecycle service logs when an ensure waits for another stream's let-go.
WAITS = "ensure_waits_for_let_go"


@pytest.fixture
async def service(tmp_path: Path, guard: ProcessGuard) -> AsyncIterator[tuple[Stub, Path]]:
    """``acpgate lifecycle-service`` as a process of its own; a stub and its log file."""
    cfg_dir = tmp_path / "gw"
    cfg = make_config(cfg_dir, term_grace_ms=300)
    log_path = tmp_path / "service.log"
    proc = await start_service_process(cfg_dir, log_path)
    guard.track(proc.pid)
    channel = service_channel(f"unix:{cfg.data_dir}/run/lifecycle.sock")
    try:
        await wait_healthy(channel, within=20.0)
        yield lifecycle_pb2_grpc.LifecycleServiceStub(channel), log_path
    finally:
        await channel.close(None)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30.0)


async def reached(log_path: Path, answer: asyncio.Future[pb.AttachResponse]) -> None:
    """Until the second ensure has certainly reached the service: it logged that it waits
    for the early stream's let-go, or it was answered already (what the edge met before)."""
    async def there() -> bool:
        text = await asyncio.to_thread(log_path.read_text, errors="replace")
        return answer.done() or WAITS in text
    await wait_until_async(there, 20.0, "the second ensure at the lifecycle service")


@pytest.mark.parametrize("heard", [True, False], ids=["initialized-then-dropped",
                                                      "dropped-untouched"])
async def test_the_sessions_own_ensure_waits_for_the_dropped_take(
        tmp_path: Path, scripts: Scripts, guard: ProcessGuard,
        service: tuple[Stub, Path], heard: bool) -> None:
    stub, log_path = service
    await stub.KeepWarm(keep(scripts.echo, tmp_path, 1))
    (warm,) = await wait_warm(stub, 1, guard)
    early = Attacher(stub, ensure=warm_only(scripts.echo, KEY))
    taken = (await early.read()).ensured
    assert taken.warm and taken.lease.lease_id == warm.lease_id
    if heard:  # the initialize sent ahead reached it: it may serve no other session
        early.send("initialize for another policy")
        assert await early.read_lines(1) == ["initialize for another policy"]

    # The session service decided otherwise: the session's own ensure, same key.
    second = Attacher(stub, ensure=take(scripts.echo, KEY, tmp_path))
    answer = asyncio.ensure_future(second.read())
    await reached(log_path, answer)
    early.call.cancel()  # the edge drops the early take

    got = (await answer).ensured  # neither FAILED_PRECONDITION nor the early lease
    assert got.spawned  # a lease of its own, never one another stream still held
    guard.track(got.lease.root_pid)
    guard.track(got.lease.adapter_pid)
    second.send("the session's initialize")
    assert await second.read_lines(1) == ["the session's initialize"]
    if heard:  # the early adapter was closed, and is not the session's
        assert got.lease.lease_id != taken.lease.lease_id
        await wait_until_async(lambda: closed(stub, taken.lease.lease_id), 20.0,
                               "the dropped take's lease closed")
        await wait_until(lambda: all(gone(p) for p in procs_of(warm, guard)), 10.0,
                         "the dropped take's processes reaped")
    # The session's adapter is its own: open under its key, in no pool, alive.
    assert await state_of(stub, got.lease.lease_id) == pb.LEASE_STATE_OPEN
    warm_now = await stub.ListLeases(pb.ListLeasesRequest(state=pb.LEASE_STATE_WARM))
    assert got.lease.lease_id not in {x.lease_id for x in warm_now.leases}
    second.send("still there")
    assert await second.read_lines(1) == ["still there"]
    second.call.cancel()
