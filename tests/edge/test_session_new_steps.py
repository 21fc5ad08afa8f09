"""session/new's concurrent steps (SPEC §3, issue 15): the row and the lease at once.

The adapter's lease is taken beside the row when the services run in other
processes, after it when both run in the edge's own process
(``EdgeRuntime.colocated``); both orders run here. When the row is refused, a
lease taken beside it (a warm adapter here) is closed again and the session
service's refusal is what the client gets; a lease refused alone is -32603 and
the row is kept without a lease (as when the lease was taken after it). Real
embedded services and a real warm pool of the built-in agent throughout.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from acpgate.lifecycle.v1 import lifecycle_pb2
from acpgate.session.v1 import session_pb2
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INTERNAL_ERROR, INVALID_PARAMS, session_key_for
from services.edge.connection import EdgeRuntime
from services.edge.handlers.new import open_row_and_lease
from services.edge.session_setup import ensure_lease

WARM = lifecycle_pb2.LEASE_STATE_WARM
ENDED = (lifecycle_pb2.LEASE_STATE_CLOSING, lifecycle_pb2.LEASE_STATE_CLOSED)


async def _warm_lease_ids(rt: EdgeRuntime) -> set[str]:
    """The pool's ready adapters (waits until there is one)."""
    for _ in range(600):
        reply = await rt.lifecycle_stub.ListLeases(lifecycle_pb2.ListLeasesRequest(state=WARM))
        ready = {lease.lease_id for lease in reply.leases if lease.adapter_pid > 0}
        if ready:
            return ready
        await asyncio.sleep(0.05)
    raise AssertionError("the demo pool never held a warm adapter")


async def _steps(rt: EdgeRuntime, *, workspace: str = "",
                 command: str | None = None) -> tuple[str, str, tuple[object, ...]]:
    """A fresh session id, its key, and its two steps (``workspace`` "" refuses the row;
    ``command`` "" refuses the lease)."""
    agent = await rt.session_stub.ResolveAgent(
        session_pb2.ResolveAgentRequest(explicit_alias="demo"))
    if command is not None:
        agent.command = command
    ws = await rt.session_stub.ResolveWorkspace(session_pb2.ResolveWorkspaceRequest(
        alias="demo", base_dir=str(rt.cfg.config_dir)))
    sid = str(uuid.uuid4())
    key = session_key_for(agent.alias, sid)
    row = rt.session_stub.CreateSession(session_pb2.CreateSessionRequest(
        session_id=sid, agent_alias=agent.alias, workspace_dir=workspace))
    return sid, key, (row, lambda: ensure_lease(rt, agent, key, ws.workspace_dir))


@pytest.fixture(params=[False, True], ids=["overlapped", "colocated"])
def colocated(request: pytest.FixtureRequest, runtime: EdgeRuntime) -> Iterator[bool]:
    """Run the test with the lease beside the row (False) and after it (True)."""
    was = runtime.colocated
    runtime.colocated = request.param
    yield request.param
    runtime.colocated = was


def test_a_refused_row_closes_a_warm_lease_taken_beside_it(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, colocated: bool) -> None:
    async def scenario() -> None:
        warm = await _warm_lease_ids(runtime)
        _, key, steps = await _steps(runtime)  # no workspace: CreateSession refuses
        with pytest.raises(JsonRpcError) as refused:
            await open_row_and_lease(runtime, key, *steps)  # type: ignore[arg-type]
        assert refused.value.code == INVALID_PARAMS
        assert "workspace_dir" in refused.value.message
        taken = (await runtime.lifecycle_stub.ListLeases(
            lifecycle_pb2.ListLeasesRequest(session_key=key))).leases
        if colocated:  # the row came first: no lease was taken
            assert not taken
            return
        assert [lease.lease_id for lease in taken] and {lease.lease_id for lease in taken} <= warm
        assert all(lease.state in ENDED for lease in taken)

    loop.run_until_complete(scenario())


def test_a_refused_lease_alone_is_start_failed_and_the_row_is_kept(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, colocated: bool) -> None:
    async def scenario() -> None:
        workspace = str(runtime.cfg.config_dir)
        sid, key, steps = await _steps(runtime, workspace=workspace, command="")
        with pytest.raises(JsonRpcError) as refused:
            await open_row_and_lease(runtime, key, *steps)  # type: ignore[arg-type]
        assert refused.value.code == INTERNAL_ERROR
        assert "demo" in refused.value.message
        row = await runtime.session_stub.GetSession(session_pb2.GetSessionRequest(session_id=sid))
        assert row.session_id == sid and not row.lease_id  # as when the lease came after it

    loop.run_until_complete(scenario())


def test_both_steps_answer(loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime,
                                colocated: bool) -> None:
    async def scenario() -> None:
        workspace = str(runtime.cfg.config_dir)
        sid, key, steps = await _steps(runtime, workspace=workspace)
        row, lease = await open_row_and_lease(runtime, key, *steps)  # type: ignore[arg-type]
        assert (row.session_id, row.ownership.session_key) == (sid, key)
        assert lease.session_key == key
        await runtime.close_lease(lease.lease_id, key, "test")

    loop.run_until_complete(scenario())


def test_embedded_services_are_colocated(runtime: EdgeRuntime) -> None:
    """Both services started in the edge's process, reached by in-process channels."""
    assert runtime.colocated is True
