"""An agent's update nested deeper than acpgate can write back, from the attacker's side.

acpgate reads an agent's line with a deeper nesting limit (1024) than it writes one with
(255): a hostile agent — or a tool result it passes on — can send a ``tool_call`` whose
``rawInput`` is nested 300 deep. Against a real ``acpgate serve`` with the scripted
agent, that update is dropped with a warning and nothing else: the message the agent
wrote beside it in the same write still reaches the client and the store, and the turn
ends as the agent said. Sent again and again, such updates cost the logs a few
structured warnings per session (counted, logged at their 1st, 2nd, 4th… time), never a
line — let alone a traceback — each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gateway.attach_client import initialize
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_a_too_deep_update_costs_only_itself(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        client = RawClient(await gw.connect(await gw.token("owner")))
        await client.result("initialize", initialize("owner"))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        for depth in (300, 1100):  # deeper than acpgate writes; deeper than it reads
            seen, answer = await client.call("session/prompt", {
                "sessionId": sid, "prompt": [{"type": "text", "text": f"nest {depth}"}]})
            assert answer["result"]["stopReason"] == "end_turn", answer
            assert f"nested {depth}" in json.dumps(seen), seen
        assert "echo: after" in await client.say(sid, "after")
        await client.result("session/close", {"sessionId": sid})
        replayed, loaded = await client.call("session/load", {"sessionId": sid, "cwd": "/"})
        assert "result" in loaded, loaded
        assert "nested 300" in json.dumps(replayed)
        await client.ws.close()
        events = gw.events()
        assert any(e.get("event") == "update_dropped" for e in events)
        assert not [e for e in events if e.get("event") == "notification_sink_failed"]


#: Too-deep updates the hostile agent sends in one session (a power of two: the last is
#: logged, with the count).
FLOOD = 32


async def test_too_deep_updates_again_and_again_are_a_few_log_lines(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        client = RawClient(await gw.connect(await gw.token("owner")))
        await client.result("initialize", initialize("owner"))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        for _ in range(FLOOD):
            _, answer = await client.call("session/prompt", {
                "sessionId": sid, "prompt": [{"type": "text", "text": "nest 300"}]})
            assert answer["result"]["stopReason"] == "end_turn", answer
        assert "echo: after" in await client.say(sid, "after")
        await client.ws.close()
        told = [e for e in gw.events()
                if e.get("event") in ("update_dropped", "accumulate_failed")]
        assert not [e for e in told if "exc" in e or e.get("level") != "warning"
                    or e.get("session_id") != sid], str(told[:2])[:2000]
        for event in ("update_dropped", "accumulate_failed"):
            counts = [e.get("count") for e in told if e["event"] == event]
            # Each said at its 1st, 2nd, 4th… time: log2(FLOOD) + 1 lines, the last with
            # how many there were.
            assert counts == [2 ** i for i in range(FLOOD.bit_length())], (event, counts)
