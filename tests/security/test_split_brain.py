"""Split brain after a store outage longer than the claim's lease.

Two gateway hosts share one real PostgreSQL store (``tests.gateway.stack``: each a
session service, lifecycle service, runtime and WebSocket edge of its own). Host A
runs a turn that waits on its client; meanwhile A is cut off — its heartbeat stops
renewing, as when it cannot reach the store — for longer than ``lease_secs``, so
host B may take the session over, and does: it loads the session and stores a turn
of its own. When A's turn then ends, A's ``AppendTurn`` arrives late, and must be
refused: the claim it was taken under is not the row's any more. A's client is told
so, A stops serving the session (without touching B's claim), and B's history is
exactly B's.

The second test is the other path by which A learns it: its heartbeat, still
running, finds the claim taken over while a turn runs — the running prompt answers
the same error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from acpgate_contracts.session.v1 import session_pb2
from services.common.protocol import MSG_SESSION_TAKEN_OVER, SESSION_TAKEN_OVER
from tests.gateway.stack import RawClient, RequestHandler, Stack, full_stack
from tests.gateway.test_two_hosts import host_config
from tests.gateway.wsfixtures import mint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: Generous ceiling for one wait; nothing here asserts on timing.
WAIT = 60.0
#: A prompt of the demo model that asks the client (a permission request) mid-turn.
ASKING_PROMPT = "ask Go on? | yes | no"


@contextlib.asynccontextmanager
async def client(stack: Stack, secret: str,
                 on_request: RequestHandler | None = None) -> AsyncIterator[RawClient]:
    async with connect(stack.edge.url, proxy=None,
                       additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
        yield RawClient(ws, on_request)


class HeldAnswer:
    """A client that answers the agent's question only when the test says so."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.asked.set()
        await self.release.wait()
        option = msg["params"]["options"][0]["optionId"]
        return {"outcome": {"outcome": "selected", "optionId": option}}


async def row(stack: Stack, sid: str) -> session_pb2.SessionRow:
    return await stack.runtime.session_service.get_session(sid)


async def user_texts(stack: Stack, sid: str) -> list[str]:
    pages = stack.runtime.session_service.stub.StreamHistory(
        session_pb2.StreamHistoryRequest(session_id=sid))
    return [i.text async for page in pages for i in page.items
            if i.role == session_pb2.HistoryItem.ROLE_USER]


async def eventually(check: Any, what: str) -> None:
    """Wait (generously) until ``await check()`` is true."""
    for _ in range(int(WAIT * 20)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def no_open_lease(stack: Stack, sid: str) -> bool:
    return not [le for le in await stack.leases(f"agent:assistant:acp:{sid}")
                if le.state == lifecycle_pb2.LEASE_STATE_OPEN]


def taken_over(sid: str) -> dict[str, Any]:
    return {"code": SESSION_TAKEN_OVER, "message": MSG_SESSION_TAKEN_OVER.format(session_id=sid)}


async def test_a_cut_off_host_cannot_store_its_turn_after_the_takeover(
        tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db, lease_secs=1)
    cfg_b = host_config(tmp_path, "b", pg_url, token_db, lease_secs=1)
    _, secret = mint(cfg_a)
    held = HeldAnswer()
    async with full_stack(cfg_a) as a, full_stack(cfg_b) as b, \
            client(a, secret, held) as on_a:
        sid = (await on_a.result("session/new", {}))["sessionId"]
        generation_a = (await row(a, sid)).claim.generation
        prompt_a = asyncio.create_task(on_a.call("session/prompt", {
            "sessionId": sid, "prompt": ASKING_PROMPT}))
        await asyncio.wait_for(held.asked.wait(), WAIT)

        # Host A is cut off: it renews nothing any more, and its claim runs out.
        assert a.runtime._heartbeat is not None
        a.runtime._heartbeat.cancel()

        async def expired() -> bool:
            return (await row(b, sid)).claim.until < int(time.time() * 1000)

        await eventually(expired, "A's claim expired")
        async with client(b, secret) as on_b:
            await on_b.result("session/load", {"sessionId": sid})
            took = await row(b, sid)
            assert took.claim.instance_id == b.runtime.gateway_instance_id
            assert took.claim.generation > generation_a
            done = await on_b.result("session/prompt", {"sessionId": sid, "prompt": "from B"})
            assert done["stopReason"] == "end_turn"

            # A's turn ends now, late: its AppendTurn must not land after B's turn.
            held.release.set()
            _, resp = await asyncio.wait_for(prompt_a, WAIT)
            assert resp.get("error") == taken_over(sid), resp
            assert await user_texts(b, sid) == ["from B"]  # nothing of A's turn

            async def a_let_go() -> bool:
                return sid not in a.runtime.registry.active and await no_open_lease(a, sid)

            await eventually(a_let_go, "host A stopped serving the session")
            kept = await row(b, sid)  # A's release left B's claim and state alone
            assert (kept.claim.instance_id, kept.claim.generation) == (
                b.runtime.gateway_instance_id, took.claim.generation)
            assert kept.state == session_pb2.SESSION_STATE_ACTIVE
            # B still serves it: another turn of B is stored after its first.
            await on_b.result("session/prompt", {"sessionId": sid, "prompt": "B again"})
            assert await user_texts(b, sid) == ["from B", "B again"]


async def test_a_turn_running_when_the_heartbeat_finds_the_claim_lost_is_told(
        tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db, lease_secs=1)
    _, secret = mint(cfg_a)
    held = HeldAnswer()
    async with full_stack(cfg_a) as a, client(a, secret, held) as on_a:
        sid = (await on_a.result("session/new", {}))["sessionId"]
        prompt_a = asyncio.create_task(on_a.call("session/prompt", {
            "sessionId": sid, "prompt": ASKING_PROMPT}))
        await asyncio.wait_for(held.asked.wait(), WAIT)
        # Another host takes the session over behind A's back (A stalled past its lease).
        con = await asyncpg.connect(pg_url)
        try:
            await con.execute(
                "UPDATE sessions SET active_instance_id = 'gw-elsewhere',"
                " active_host = 'elsewhere', claim_generation = claim_generation + 1"
                " WHERE id = $1", sid)
        finally:
            await con.close()

        async def a_let_go() -> bool:
            return sid not in a.runtime.registry.active

        await eventually(a_let_go, "host A's heartbeat gave the session up")
        held.release.set()  # the client's late answer goes nowhere
        _, resp = await asyncio.wait_for(prompt_a, WAIT)
        assert resp.get("error") == taken_over(sid), resp
        await eventually(lambda: no_open_lease(a, sid), "A's adapter reaped")
        assert await user_texts(a, sid) == []
        stolen = await row(a, sid)
        assert stolen.claim.instance_id == "gw-elsewhere"
