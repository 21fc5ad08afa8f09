"""A gateway session outlives its connection: detach, wait, reattach.

A real ``acpgate serve`` (built-in agent, fake model). A client cut mid-turn —
the socket closed without a close frame — leaves its session detached: the
turn runs on, and a new connection of the same token that resumes the session
gets the rest of the turn live and can prompt again; a permission request
pending across the cut is asked again of the new connection and its answer
reaches the agent; past ``[gateway] detach_grace_secs`` the session is released
as any disconnect's was, and is loaded from the store like any.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.attach_client import Message, cut, kind, read_until
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import WAIT, Gateway, running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def says(text: str) -> Callable[[Message], bool]:
    """A message that is an agent message chunk containing ``text``."""
    def check(msg: Message) -> bool:
        return kind(msg) == "agent_message_chunk" and \
            text in str(msg["params"]["update"]["content"].get("text", ""))
    return check


async def active_sessions(gw: Gateway) -> float:
    """The gateway's ``acpgate_active_sessions``."""
    return (await gw.metrics()).get("acpgate_active_sessions", 0.0)


async def until(check: Callable[[], Any], what: str) -> None:
    """Poll ``check`` (async) until it is true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not await check():
        assert loop.time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.1)


async def test_a_turn_cut_midway_runs_on_and_a_new_connection_gets_its_rest(
        tmp_path: Path) -> None:
    go = tmp_path / "go"
    waits = f"shell while [ ! -e {go} ]; do sleep 0.05; done; echo finished"
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": waits})
        await read_until(first.ws, lambda m: kind(m) == "tool_call")
        cut(first.ws)  # mid-turn: the tool waits for ``go``
        await asyncio.sleep(2)  # the Wi-Fi comes back

        again = RawClient(await gw.connect(token))
        await again.result("session/resume", {"sessionId": sid})
        go.touch()
        await read_until(again.ws, says("finished"))
        # The prompt's answer went to the connection that is gone: this one is told.
        end = (await read_until(again.ws, lambda m: kind(m) == "turn_complete"))[-1]
        assert end["params"]["sessionId"] == sid, end
        assert end["params"]["update"]["stopReason"] == "end_turn", end
        assert "inputTokens" in end["params"]["update"]["usage"], end
        # The session is this connection's now: it prompts as any.
        assert "echo: next" in await again.say(sid, "next")
        assert await active_sessions(gw) == 1
        await again.ws.close()


async def test_a_permission_pending_across_a_cut_is_answered_after_the_reattach(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, autonomy="supervised") as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": "shell echo approved"})
        await read_until(first.ws, lambda m: m.get("method") == "session/request_permission")
        cut(first.ws)  # the question stays open, unanswered
        await asyncio.sleep(2)

        again = RawClient(await gw.connect(token))
        await again.result("session/resume", {"sessionId": sid})
        seen = await read_until(again.ws,
                                lambda m: m.get("method") == "session/request_permission")
        asked = seen[-1]
        assert asked["params"]["sessionId"] == sid
        allow = next(o["optionId"] for o in asked["params"]["options"]
                     if o["kind"] == "allow_once")
        await again.ws.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": allow}}}))
        await read_until(again.ws, says("approved"))
        await read_until(again.ws, lambda m: kind(m) == "turn_complete")
        await again.ws.close()


async def test_a_turn_that_ends_while_detached_is_reported_at_the_reattach(
        tmp_path: Path) -> None:
    go = tmp_path / "go"
    waits = f"shell while [ ! -e {go} ]; do sleep 0.05; done; echo finished"
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": waits})
        await read_until(first.ws, lambda m: kind(m) == "tool_call")
        cut(first.ws)
        go.touch()  # the turn ends while nobody is attached, and is stored

        async def stored() -> bool:
            return gw.stored_items(sid) > 0
        await until(stored, "the turn stored")
        again = RawClient(await gw.connect(token))
        seen, resumed = await again.call("session/resume", {"sessionId": sid})
        assert "result" in resumed, resumed
        ends = [m["params"]["update"]["stopReason"] for m in seen
                if kind(m) == "turn_complete"]
        assert ends == ["end_turn"], seen
        assert "echo: next" in await again.say(sid, "next")
        await again.ws.close()


async def test_past_the_grace_the_session_is_released_as_any_disconnect(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway="detach_grace_secs = 1\n") as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sid = (await first.result("session/new", {}))["sessionId"]
        assert "echo: before" in await first.say(sid, "before")
        cut(first.ws)

        async def released() -> bool:
            return await active_sessions(gw) == 0
        await until(released, "the detached session released after its grace")
        assert any(e.get("event") == "session_detach_expired" for e in gw.events())
        again = RawClient(await gw.connect(token))
        _, load = await again.call("session/load", {"sessionId": sid})
        assert "result" in load, load
        assert "echo: after" in await again.say(sid, "after")
        await again.ws.close()


async def test_grace_zero_releases_at_the_disconnect(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway="detach_grace_secs = 0\n") as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sid = (await first.result("session/new", {}))["sessionId"]
        assert "echo: before" in await first.say(sid, "before")
        cut(first.ws)

        async def released() -> bool:
            return await active_sessions(gw) == 0
        await until(released, "the session released at the disconnect")
        assert not any(e.get("event") == "session_detached" for e in gw.events())


async def test_a_stop_cancels_a_detached_turn_stores_it_and_waits_for_nothing_else(
        tmp_path: Path) -> None:
    """SIGTERM with a session detached mid-turn: its turn is cancelled as a connected
    client's would be (and stored with what it streamed); the stop does not sit out the
    gone client's drain or the session's grace timer, so no process is killed for being
    late."""
    async with running_gateway(tmp_path, extra=agent_section("scripted", "")) as gw:
        client = RawClient(await gw.connect(await gw.token("leaver")))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        await client.result("session/prompt", {"sessionId": sid, "prompt": "hello"})
        before = gw.stored_items(sid)
        await client.send("session/prompt", {"sessionId": sid, "prompt": "stream 300"})
        await read_until(client.ws, lambda m: kind(m) == "agent_message_chunk")
        cut(client.ws)

        async def detached() -> bool:
            return any(e.get("event") == "session_detached" for e in gw.events())
        await until(detached, "the session to detach")
        gw.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(gw.proc.wait(), 60) == 0
        events = gw.events()
        assert not [e for e in events if e.get("event") == "child_kill"], "nothing was late"
        assert any(e.get("event") == "detached_turns_cancelled" for e in events)
        assert gw.stored_items(sid) == before + 2, "the cancelled turn is stored"
