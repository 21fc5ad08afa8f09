"""The replay rings' one budget from the attacker's side (``[gateway] replay_budget_chars``).

A real ``acpgate serve`` under a tiny budget. One token's sessions stream a flood
many times the budget: the rings together stay within it (``/metrics``), the
flooder's own oldest events are what goes (its replay from there is read from the
session's event log in the store — exact all the same), and another token's session
that streamed a little keeps its replay in the ring — one token cannot push
another's replay out of memory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.attach_client import cut, event_ids, initialize, kind
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, Token, running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BUDGET = 200_000
#: The flooder's sessions, and what each streams: ~1 MB, five times the budget.
FLOOD_SESSIONS = 4
FLOOD = "flood 3000 200"


async def _session(gw: Gateway, token: Token, name: str) -> tuple[RawClient, str]:
    client = RawClient(await gw.connect(token))
    await client.result("initialize", initialize(name))
    sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
    return client, sid


async def _attach_after(gw: Gateway, token: Token, sid: str, after: int,
                        ) -> tuple[str, list[dict[str, Any]]]:
    """Attach ``sid`` again replaying after event ``after``: the policy the answer names,
    and what was replayed (before the answer)."""
    client = RawClient(await gw.connect(token))
    seen, resp = await client.call("session/attach", {
        "sessionId": sid, "historyPolicy": "after_message", "afterMessageId": after})
    assert "result" in resp, resp
    await client.ws.close()
    return str(resp["result"]["historyPolicy"]), seen


async def test_one_tokens_flood_cannot_push_another_tokens_replay_out(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway=f"replay_budget_chars = {BUDGET}\n",
                               extra=agent_section("scripted")) as gw:
        victim_token, flooder_token = await gw.token("victim"), await gw.token("flooder")
        victim, sid = await _session(gw, victim_token, "victim")
        streamed, resp = await victim.call("session/prompt", {"sessionId": sid,
                                                              "prompt": "stream 5"})
        assert resp["result"]["stopReason"] == "end_turn", resp
        mine = event_ids(streamed)
        assert len(mine) == 5, streamed
        cut(victim.ws)  # the victim's client goes away; its session waits, detached

        floods = [await _session(gw, flooder_token, f"flooder {i}")
                  for i in range(FLOOD_SESSIONS)]
        answers = await asyncio.gather(*(c.call("session/prompt", {"sessionId": s,
                                                                   "prompt": FLOOD})
                                         for c, s in floods))
        first_flooded = event_ids(answers[0][0])[0]
        metrics = await gw.metrics()
        assert metrics['acpgate_replay_ring_chars{of="budget"}'] == BUDGET
        assert 0 < metrics['acpgate_replay_ring_chars{of="held"}'] <= BUDGET, metrics
        assert metrics["acpgate_replay_trimmed_chars_total"] > 3 * BUDGET, metrics

        # The flooder's own oldest events left the ring: its replay from there is read from
        # the log, exact all the same.
        policy, flooded = await _attach_after(gw, flooder_token, floods[0][1], first_flooded)
        assert policy == "after_message"
        ids = event_ids(flooded)
        assert ids[:3] == [first_flooded + 1, first_flooded + 2, first_flooded + 3], ids[:3]
        # The victim's replay is whole, and from the ring: exactly what followed its first
        # event, in order.
        policy, replayed = await _attach_after(gw, victim_token, sid, mine[0])
        assert policy == "after_message"

        def from_log(session_id: str) -> bool:
            return any(e.get("event") == "replay_from_log" and e.get("session_id") == session_id
                       for e in gw.events())
        for _ in range(100):  # (log lines are written by a thread of their own)
            if from_log(floods[0][1]):
                break
            await asyncio.sleep(0.05)
        assert from_log(floods[0][1]) and not from_log(sid)
        ids = event_ids(replayed)
        assert ids[:4] == mine[1:] and ids == list(range(mine[1], mine[1] + len(ids))), ids
        assert [m["params"]["update"]["content"]["text"] for m in replayed
                if kind(m) == "agent_message_chunk"] == [f"chunk {i} " for i in range(1, 5)]
        for client, _ in floods:
            await client.ws.close()
