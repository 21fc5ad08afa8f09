"""An agent asking questions without end, from the attacker's side.

Each permission request (or elicitation) an agent sends is relayed to the client and
held open — a task, the agent's id, the client's pending request — until the client
answers. A hostile agent (``tests/security/scripted_agent.py``, ``burst``) sends ten
thousand at once: at most ``MAX_OPEN_QUESTIONS`` reach the client, every other one is
answered at once as ``cancelled`` (reason ``too_many_open``), the warning is counted, and
the session goes on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.protocol import MAX_OPEN_QUESTIONS
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_ASKED = MAX_OPEN_QUESTIONS + 6000


async def test_an_agent_cannot_hold_questions_open_without_bound(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        client = RawClient(await gw.connect(await gw.token("reader")))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        seen, resp = await client.call("session/prompt",
                                       {"sessionId": sid, "prompt": f"burst {_ASKED} 0.5"})
        assert resp.get("result") == {"stopReason": "end_turn"}, resp
        asked = {m["id"] for m in seen if m.get("method") == "session/request_permission"}
        assert len(asked) == MAX_OPEN_QUESTIONS
        assert await client.say(sid, "hi") == "echo: hi"
        await client.ws.close()
    warned = [e for e in gw.events() if e.get("event") == "agent_questions_over_limit"]
    assert warned and warned[-1]["count"] <= _ASKED - MAX_OPEN_QUESTIONS
    assert len(warned) < 20  # counted: logged at powers of two
