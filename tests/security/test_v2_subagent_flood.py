"""A hostile v2 agent announcing children without end, from the attacker's side
(``tests/v2_agent.py``, prompt ``swarm <n>``).

Each child the agent announces would be a stored row and state kept by the edge: past
``[acp] max_subagents_per_session`` (64 by default) further children are neither stored
nor relayed — the client sees exactly the bound's worth, the store holds exactly that
many child rows, nothing of a child past it reaches anyone — and a warning is logged.
The session itself goes on: its turn ends with the agent's answer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from services.common.protocol import DEFAULT_MAX_SUBAGENTS
from tests.gateway.attach_client import initialize
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.v2_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_ANNOUNCED = DEFAULT_MAX_SUBAGENTS + 36


async def _children(client: RawClient, parent: str) -> set[str]:
    listed = (await client.result("session/list", {}))["sessions"]
    return {s["sessionId"] for s in listed
            if s["_meta"]["acpgate"].get("parentSessionId") == parent}


async def test_an_agent_cannot_announce_children_without_bound(tmp_path: Path) -> None:
    extra = agent_section("two", str(tmp_path / "agent.log"), "v2", '"auto"')
    async with running_gateway(tmp_path, extra=extra) as gw:
        attacker = RawClient(await gw.connect(await gw.token("attacker")))
        await attacker.result("initialize", initialize("attacker"))
        sid = (await attacker.result("session/new", {"agentAlias": "two"}))["sessionId"]
        seen, resp = await attacker.call("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": f"swarm {_ANNOUNCED}"}]})
        assert resp["result"]["stopReason"] == "end_turn", resp

        updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
        announced = {u["sessionId"] for u in updates if u["sessionUpdate"] == "subagent_update"}
        assert len(announced) == DEFAULT_MAX_SUBAGENTS
        # Nothing of a child past the bound reaches the client; the answer still does.
        text = json.dumps(updates)
        assert f"swarm child {DEFAULT_MAX_SUBAGENTS - 1}\"" in text
        assert f"swarm child {DEFAULT_MAX_SUBAGENTS}\"" not in text
        assert f"Swarm {DEFAULT_MAX_SUBAGENTS}\"" not in text
        assert "swarmed" in text

        # Stored: exactly the bound's worth of child rows (written beside the relay).
        rows: set[str] = set()
        for _ in range(200):
            rows = await _children(attacker, sid)
            if len(rows) >= DEFAULT_MAX_SUBAGENTS:
                break
            await asyncio.sleep(0.05)
        assert rows == announced

        # A second turn's children are past the bound too: none more is stored or relayed.
        seen, resp = await attacker.call("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "sub more"}]})
        assert resp["result"]["stopReason"] == "end_turn", resp
        assert not [m for m in seen if m.get("method") == "session/update"
                    and m["params"]["update"]["sessionUpdate"] == "subagent_update"]
        assert "child: sub more" not in json.dumps(seen)
        assert await _children(attacker, sid) == announced
        await attacker.ws.close()
    logged = [json.loads(line) for line in gw.log.read_text().splitlines()
              if "subagents_over_limit" in line]
    assert len(logged) == 1, logged
    assert logged[0]["session_id"] == sid and logged[0]["limit"] == DEFAULT_MAX_SUBAGENTS
