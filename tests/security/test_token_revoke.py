"""Revoking a token closes its open connections, across processes.

``acpgate token revoke`` is another process than the edge: it only writes the
token store. The edge notices within its poll interval (a quarter second; the
wait below is only a generous ceiling) and closes every live connection of
that token with 1008, releasing its sessions; other tokens' connections go on,
and the revoked token cannot come back (401).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.gateway.attach_client import cut
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import WAIT, running_gateway
from tests.security.procs import eventually
from tests.security.relay_agent import agent_section as relay_section
from tests.security.relay_agent import received
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_revoke_closes_that_tokens_live_connections(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        doomed, kept = await gw.token("doomed"), await gw.token("kept")
        first, second = RawClient(await gw.connect(doomed)), RawClient(await gw.connect(doomed))
        other = RawClient(await gw.connect(kept))
        await first.result("session/new", {"agentAlias": "demo"})
        assert (await gw.metrics())["acpgate_active_sessions"] == 1

        await gw.revoke(doomed)
        for client in (first, second):
            with pytest.raises(ConnectionClosed) as closed:
                while True:  # (an update the session sent before may come first)
                    await asyncio.wait_for(client.ws.recv(), WAIT)
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "token revoked")

        # The other token is untouched; the revoked one is refused at the door.
        assert (await other.result("initialize", {}))["protocolVersion"] == 1
        with pytest.raises(InvalidStatus) as refused:
            await gw.connect(doomed)
        assert refused.value.response.status_code == 401
        # The closed connection's session was released (the row stays loadable).
        for _ in range(int(WAIT * 20)):
            if (await gw.metrics())["acpgate_active_sessions"] == 0:
                break
            await asyncio.sleep(0.05)
        assert (await gw.metrics())["acpgate_active_sessions"] == 0
        assert any(e.get("event") == "ws_token_revoked" for e in gw.events())
        await other.ws.close()


async def test_revoke_cancels_the_streaming_turn_and_stores_none_of_it(tmp_path: Path) -> None:
    """Revoking a token cancels its streaming turn (the agent gets session/cancel) instead
    of letting it run on through the 15 s drain, and stores none of it."""
    received = tmp_path / "agent-received.log"
    async with running_gateway(tmp_path, extra=agent_section("scripted", str(received))) as gw:
        doomed = await gw.token("doomed")
        client = RawClient(await gw.connect(doomed))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        await client.result("session/prompt", {"sessionId": sid, "prompt": "hello"})
        before = gw.stored_items(sid)
        assert before > 0  # a completed turn is stored (what the check below reads)

        # 10 s of chunks unless cancelled: shorter than the 15 s drain.
        await client.send("session/prompt", {"sessionId": sid, "prompt": "stream 100"})
        while json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)).get("method") \
                != "session/update":
            pass  # streaming now
        await gw.revoke(doomed)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(client.ws.recv(), WAIT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008

        # The session is let go, and nothing of the cancelled turn was stored ...
        for _ in range(int(WAIT * 20)):
            if (await gw.metrics())["acpgate_active_sessions"] == 0:
                break
            await asyncio.sleep(0.05)
        assert (await gw.metrics())["acpgate_active_sessions"] == 0
        assert gw.stored_items(sid) == before
        # ... for the agent was told to stop it (ACP session/cancel).
        await eventually(lambda: received.exists() and "cancel" in received.read_text(),
                         WAIT, "the agent to get session/cancel")


async def test_revoke_ends_a_detached_sessions_turn_and_stores_none_of_it(
        tmp_path: Path) -> None:
    """A client that dropped its connection mid-turn holds no connection the watch could
    close: its detached session would run on for the whole grace. The revocation ends it
    too — the agent told to cancel, the session released, nothing of the turn stored."""
    received = tmp_path / "agent-received.log"
    async with running_gateway(tmp_path, extra=agent_section("scripted", str(received))) as gw:
        doomed, kept = await gw.token("doomed"), await gw.token("kept")
        client = RawClient(await gw.connect(doomed))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        await client.result("session/prompt", {"sessionId": sid, "prompt": "hello"})
        before = gw.stored_items(sid)
        # Someone else's detached session is left alone.
        bystander = RawClient(await gw.connect(kept))
        other = (await bystander.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        await bystander.result("session/prompt", {"sessionId": other, "prompt": "hello"})

        await client.send("session/prompt", {"sessionId": sid, "prompt": "stream 100"})
        while json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)).get("method") \
                != "session/update":
            pass  # streaming now
        cut(client.ws)
        cut(bystander.ws)
        await eventually(lambda: sum(e.get("event") == "session_detached"
                                     for e in gw.events()) == 2, WAIT, "both to detach")
        assert (await gw.metrics())["acpgate_active_sessions"] == 2

        await gw.revoke(doomed)
        await eventually(lambda: received.exists() and "cancel" in received.read_text(),
                         WAIT, "the agent to get session/cancel")
        for _ in range(int(WAIT * 20)):
            if (await gw.metrics())["acpgate_active_sessions"] == 1:
                break
            await asyncio.sleep(0.05)
        assert (await gw.metrics())["acpgate_active_sessions"] == 1, "the other one stays"

        def released(session_id: str) -> list[Any]:
            return [e.get("reason") for e in gw.events()
                    if e.get("event") == "session_released" and e.get("session_id") == session_id]
        # (log lines are written by a thread of their own: they may trail the release)
        await eventually(lambda: released(sid) == ["revoked"], WAIT, "the release's log line")
        assert any(e.get("event") == "detached_sessions_token_revoked" for e in gw.events())
        assert released(other) == []
        assert gw.stored_items(sid) == before, "released: nothing of the turn is stored"


async def test_a_queued_prompt_of_a_revoked_token_never_runs(tmp_path: Path) -> None:
    """An agent that queues prompts (claude-agent-acp's ``promptQueueing``) gets the next
    prompt once the turn ends: a revoked token's queued prompt must not be that turn."""
    log = tmp_path / "relay.log"
    async with running_gateway(tmp_path, extra=relay_section("relay", str(log))) as gw:
        doomed = await gw.token("doomed")
        client = RawClient(await gw.connect(doomed))
        sid = (await client.result("session/new", {"agentAlias": "relay"}))["sessionId"]
        await client.send("session/prompt", {"sessionId": sid, "prompt": "stream 100"})
        while json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)).get("method") \
                != "session/update":
            pass  # streaming now
        await client.send("session/prompt", {"sessionId": sid, "prompt": "queued"})
        await gw.revoke(doomed)
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(client.ws.recv(), WAIT)

        def prompts() -> list[Any]:
            return [m["params"]["prompt"] for m in received(str(log))
                    if m.get("method") == "session/prompt"]
        await eventually(lambda: any(m.get("method") == "session/cancel"
                                     for m in received(str(log))), WAIT, "the cancel")
        for _ in range(int(WAIT * 20)):
            if (await gw.metrics())["acpgate_active_sessions"] == 0:
                break
            await asyncio.sleep(0.05)
        assert (await gw.metrics())["acpgate_active_sessions"] == 0
        assert [p[0]["text"] for p in prompts()] == ["stream 100"], prompts()
