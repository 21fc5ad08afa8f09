"""A hostile v2 agent using subagents to reach another principal's session, from the
attacker's side (``tests/v2_agent.py``, prompt ``claim <id>``).

The agent of the attacker's session sends an update on a session it never announced,
announces a "child" under the id of the victim's session, sends updates on that id, and ``session_message`` s naming it and an unknown
session. Child ids are acpgate's own, minted per announcement: the announced child is a
new session under the attacker's session — its updates reach only the attacker's
clients, its row is the attacker's, listed under the attacker's session — while the
victim's stream, row and list stay untouched, and no id of the agent's reaches a client.
Nor can an agent forge the forms acpgate carries a child in.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.attach_client import initialize, kind, read_until
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.v2_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _prompt(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


async def _listed(client: RawClient) -> dict[str, dict[str, Any]]:
    return {s["sessionId"]: s for s in (await client.result("session/list", {}))["sessions"]}


async def test_an_agent_cannot_claim_another_principals_session_as_its_child(
        tmp_path: Path) -> None:
    extra = agent_section("two", str(tmp_path / "agent.log"), "v2", '"auto"')
    async with running_gateway(tmp_path, extra=extra) as gw:
        victim = RawClient(await gw.connect(await gw.token("victim")))
        await victim.result("initialize", initialize("victim"))
        v_sid = (await victim.result("session/new", {"agentAlias": "two"}))["sessionId"]
        _, resp = await victim.call("session/prompt", {"sessionId": v_sid,
                                                        "prompt": _prompt("hello")})
        assert resp["result"]["stopReason"] == "end_turn", resp

        attacker = RawClient(await gw.connect(await gw.token("attacker")))
        await attacker.result("initialize", initialize("attacker"))
        a_sid = (await attacker.result("session/new", {"agentAlias": "two"}))["sessionId"]
        seen, resp = await attacker.call("session/prompt", {
            "sessionId": a_sid, "prompt": _prompt(f"claim {v_sid}")})
        assert resp["result"]["stopReason"] == "end_turn", resp

        # The attacker's client: everything on its own session, the "child" a new id.
        updates = [m for m in seen if m.get("method") == "session/update"]
        assert {m["params"]["sessionId"] for m in updates} == {a_sid}
        announced = [m["params"]["update"] for m in updates if kind(m) == "subagent_update"]
        child = announced[0]["sessionId"]
        assert child != v_sid and {u["sessionId"] for u in announced} == {child}
        texts = [m["params"]["update"] for m in updates if kind(m) == "agent_thought_chunk"]
        assert texts and texts[0]["_meta"]["acpgate"]["subagent"]["sessionId"] == child
        messages = [m["params"]["update"] for m in updates if kind(m) == "session_message"]
        assert messages[0]["recipientSessionId"] == child
        # A session the agent names that is none of this session's tree is left out.
        assert "senderSessionId" not in messages[1] and "someone-else" not in json.dumps(seen)
        # An update on a session the agent never announced reaches nobody.
        assert "never announced" not in json.dumps(seen)
        # The victim's id appears only where the attacker typed it (its own prompt).
        assert all(v_sid not in json.dumps(m["params"]["update"]) for m in updates
                   if kind(m) != "prompt_received"), updates

        # The victim: nothing arrived, and its next turn streams its own updates only.
        v_seen, resp = await victim.call("session/prompt", {"sessionId": v_sid,
                                                             "prompt": _prompt("again")})
        assert "result" in resp, resp
        assert "injected" not in json.dumps(v_seen)
        assert {m["params"]["sessionId"] for m in v_seen
                if m.get("method") == "session/update"} == {v_sid}

        # Rows: the child is the attacker's, under the attacker's session; the victim's
        # row is untouched and the victim does not see the child.
        for _ in range(100):
            mine = await _listed(attacker)
            if child in mine:
                break
            await asyncio.sleep(0.05)
        assert mine[child]["_meta"]["acpgate"]["parentSessionId"] == a_sid
        assert v_sid not in mine
        theirs = await _listed(victim)
        assert child not in theirs and set(theirs) == {v_sid}
        assert "parentSessionId" not in theirs[v_sid]["_meta"]["acpgate"]
        assert theirs[v_sid].get("title") != "Mine now"
        await victim.ws.close()
        await attacker.ws.close()


async def test_an_agent_cannot_forge_acpgates_child_forms(tmp_path: Path) -> None:
    """A v1 agent (relayed as it speaks) sends what acpgate carries a child in — its own
    ``subagent_session_update`` naming the victim's session, a ``subagent_update`` with
    acpgate's mark — to a v2 client: nothing comes out under another session's id, and
    no row is stored under an id the agent chose."""
    extra = agent_section("one", str(tmp_path / "agent.log"), "refuse2", '"auto"')
    async with running_gateway(tmp_path, extra=extra) as gw:
        victim = RawClient(await gw.connect(await gw.token("victim")))
        await victim.result("initialize", initialize("victim"))
        v_sid = (await victim.result("session/new", {"agentAlias": "one"}))["sessionId"]

        ws = await gw.connect(await gw.token("attacker"))
        attacker = RawClient(ws)
        await attacker.result("initialize", {"protocolVersion": 2,
                                             "info": {"name": "attacker", "version": "1"}})
        a_sid = (await attacker.result("session/new", {"agentAlias": "one"}))["sessionId"]
        _, resp = await attacker.call("session/prompt", {
            "sessionId": a_sid, "prompt": _prompt(f"forge {v_sid}")})
        assert "messageId" in resp["result"], resp
        seen = await read_until(ws, lambda m: kind(m) == "state_update"
                                and "stopReason" in m["params"]["update"])
        updates = [m for m in seen if m.get("method") == "session/update"]
        assert {m["params"]["sessionId"] for m in updates} == {a_sid}, updates
        assert "agent-chosen" not in json.dumps(updates)  # its acpgate meta is screened
        mine = await _listed(attacker)
        assert set(mine) == {a_sid} and not any("agent-chosen" in s for s in mine)
        await victim.ws.close()
        await ws.close()
