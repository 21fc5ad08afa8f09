"""session/new's steps (SPEC §3): the decision and the warm adapter at once.

While the session service decides the session and writes its row (one
``ResolveNewSession``), the edge already takes a warm adapter of the alias the
session will most likely get and sends it ``initialize``
(``WarmPools.take_early``). The decision rules: the early adapter serves the
session only when it is that alias's, with that launch spec and the
``initialize`` that session's policy calls for; otherwise — and when the
session is refused — it is let go (its lease closed) and the lease is ensured
as usual; a pool with nothing ready falls back to a spawn. Real embedded
services and a real warm pool of the built-in agent throughout.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acpgate_contracts.session.v1 import session_pb2
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS
from services.edge.backends.lifecycle import EnsureSpec, Lease, LeaseState
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.new import session_new
from services.edge.sessions.claims import HostClaims
from services.edge.sessions.warm import EarlyTake
from services.edge.transport.connection import LOCAL_OPERATOR, EdgeRuntime
from tests.e2e.harness import workspace_beside_config

WARM = LeaseState.WARM
OPEN = LeaseState.OPEN
CLOSED = LeaseState.CLOSED


async def _ignore(line: str) -> None:
    """The client side of the connection (the answers are read from the handler)."""


async def _warm_lease_ids(rt: EdgeRuntime) -> set[str]:
    """The demo pool's ready adapters (waits until there is one)."""
    for _ in range(600):
        ready = {lease.lease_id for lease in await rt.lifecycle.list_leases(WARM)
                 if lease.adapter_pid > 0}
        if ready:
            return ready
        await asyncio.sleep(0.05)
    raise AssertionError("the demo pool never held a warm adapter")


async def _lease(rt: EdgeRuntime, lease_id: str) -> Lease:
    return next(lease for lease in await rt.lifecycle.list_leases() if lease.lease_id == lease_id)


async def _let_go(rt: EdgeRuntime, lease_id: str) -> LeaseState:
    """Wait until an early-taken adapter was let go: closed, or back in its pool when its
    stream never reached it (it heard nothing of the session); its state then."""
    for _ in range(400):
        state = (await _lease(rt, lease_id)).state
        if state in (CLOSED, WARM):
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"lease {lease_id} was never let go")


def _spy(rt: EdgeRuntime, taken: list[EarlyTake | None]) -> None:
    """Record what ``take_early`` returns (undone with ``del rt.warm.take_early``)."""
    take_early = rt.warm.take_early

    def spy(*args: Any) -> EarlyTake | None:
        early = take_early(*args)
        taken.append(early)
        return early
    rt.warm.take_early = spy  # type: ignore[method-assign]


async def _new(conn: DialectConnection, cwd: Path, **params: Any) -> str:
    """session/new of the demo agent in ``cwd``; the session id."""
    answered = await session_new(conn, {"agentAlias": "demo", "cwd": str(cwd), **params})
    await answered.then()  # as the peer does once the answer is written
    return str(answered.result["sessionId"])


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The session workspace (beside, not above, the config dir)."""
    return workspace_beside_config(tmp_path)


@pytest.fixture
def conn(runtime: EdgeRuntime, loop: asyncio.AbstractEventLoop) -> Iterator[DialectConnection]:
    """A client connection; its sessions are released afterwards."""
    connection = DialectConnection(runtime, _ignore, methods={}, caller=LOCAL_OPERATOR)
    yield connection
    loop.run_until_complete(connection.close())


def test_a_warm_session_new_uses_the_adapter_taken_early(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, conn: DialectConnection,
        work: Path) -> None:
    async def scenario() -> None:
        warm = await _warm_lease_ids(runtime)
        sid = await _new(conn, work)
        session = conn.sessions[sid]
        assert session.lease_id in warm
        lease = await _lease(runtime, session.lease_id)
        assert (lease.state, lease.session_key) == (OPEN, session.session_key)
        row = await runtime.session_service.get_session(sid)
        assert row.claim.instance_id == runtime.gateway_instance_id

    loop.run_until_complete(scenario())


def test_a_refused_session_new_lets_the_early_adapter_go(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, conn: DialectConnection,
        work: Path) -> None:
    async def scenario() -> None:
        (early,) = await _warm_lease_ids(runtime)
        taken: list[EarlyTake | None] = []
        _spy(runtime, taken)
        try:
            with pytest.raises(JsonRpcError) as refused:  # a cwd inside acpgate's own state
                await _new(conn, runtime.cfg.data_dir)
        finally:
            del runtime.warm.take_early
        assert refused.value.code == INVALID_PARAMS
        (took,) = taken
        assert took is not None
        await _let_go(runtime, early)
        assert await _warm_lease_ids(runtime)  # the pool has one again (back, or refilled)

    loop.run_until_complete(scenario())


def test_an_early_adapter_initialized_for_another_policy_is_let_go(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, conn: DialectConnection,
        work: Path) -> None:
    async def scenario() -> None:
        (early,) = await _warm_lease_ids(runtime)
        declared = runtime.warm._agents["demo"]
        # As if the edge had the pool declared while the config said readonly: the
        # initialize it sends ahead promises no writes, the session's policy allows them.
        runtime.warm._agents["demo"] = dataclasses.replace(declared, autonomy="readonly")
        taken: list[EarlyTake | None] = []
        _spy(runtime, taken)
        try:
            sid = await _new(conn, work)
        finally:
            runtime.warm._agents["demo"] = declared
            del runtime.warm.take_early
        (took,) = taken
        assert took is not None and took.initialize["clientCapabilities"]["fs"] == {
            "readTextFile": True, "writeTextFile": False}
        session = conn.sessions[sid]
        assert session.adapter is not None and session.adapter.link is not took.link
        if session.lease_id != early:  # else: it came back untouched and was taken again
            await _let_go(runtime, early)

    loop.run_until_complete(scenario())


def test_an_empty_pool_falls_back_to_a_spawn(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, conn: DialectConnection,
        work: Path) -> None:
    async def scenario() -> None:
        warm = await _warm_lease_ids(runtime)
        agent = runtime.warm._agents["demo"]
        # Someone else takes the pool's only adapter first.
        other = await runtime.lifecycle.ensure(EnsureSpec(
            session_key="agent:demo:acp:other", launch=agent.launch,
            warm_pool="agent:demo"))
        assert other.warm
        sid = await _new(conn, work)
        lease = await _lease(runtime, conn.sessions[sid].lease_id)
        assert lease.lease_id not in warm and lease.state == OPEN
        await runtime.close_lease(other.lease.lease_id, "", "test")

    loop.run_until_complete(scenario())


def test_an_alias_without_a_pool_takes_nothing_early(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, work: Path) -> None:
    calls: list[str] = []
    take_early = runtime.warm.take_early

    def spy(alias: str, *args: Any) -> Any:
        early = take_early(alias, *args)
        calls.append(f"{alias}:{early is not None}")
        return early

    async def scenario() -> None:
        connection = DialectConnection(runtime, _ignore, methods={}, caller=LOCAL_OPERATOR)
        runtime.warm.take_early = spy  # type: ignore[method-assign]
        try:
            await session_new(connection, {"agentAlias": "sdk", "cwd": str(work)})
        finally:
            del runtime.warm.take_early
            await connection.close()
        assert calls == ["sdk:False"]

    loop.run_until_complete(scenario())


def test_the_active_write_after_the_answer_lands_before_the_release(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, conn: DialectConnection,
        work: Path) -> None:
    async def scenario() -> None:
        sid = await _new(conn, work)
        session = conn.sessions[sid]
        assert session.row_write is not None  # the claim was fresh: written after the answer
        await runtime.deactivate(session, "test")  # at once, the write perhaps still going
        row = await runtime.session_service.get_session(sid)
        assert row.state == session_pb2.SESSION_STATE_INACTIVE and not row.claim.instance_id
        assert row.lease_id == session.lease_id and row.adapter_session_id  # and it did land

    loop.run_until_complete(scenario())


def test_a_claim_not_certainly_held_is_written_before_the_answer(
        loop: asyncio.AbstractEventLoop, runtime: EdgeRuntime, conn: DialectConnection,
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime.claims, "certainly_held", lambda taken_at, now: False)

    async def scenario() -> None:
        sid = await _new(conn, work)
        assert conn.sessions[sid].row_write is None
        row = await runtime.session_service.get_session(sid)
        assert row.lease_id == conn.sessions[sid].lease_id and row.adapter_session_id

    loop.run_until_complete(scenario())


@pytest.mark.parametrize(("ttl_ms", "age", "held"), [
    (30_000, 0.0, True), (30_000, 9.99, True), (30_000, 10.0, False), (30_000, 25.0, False),
    (3_000, 0.5, True), (3_000, 1.0, False),
])
def test_a_claim_is_certainly_held_for_less_than_a_heartbeat(ttl_ms: int, age: float,
                                                             held: bool) -> None:
    """Less than a third of the lease time old: two thirds are left, no other host can
    have taken it (the heartbeat renews it every third)."""
    claims = HostClaims(None)  # type: ignore[arg-type]  # no call is made
    claims.configure("gw-1", ttl_ms)
    assert claims.certainly_held(100.0, 100.0 + age) is held
