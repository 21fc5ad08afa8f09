"""An agent's burst of permission requests, withdrawn again, never closes a reading client.

A hostile external agent (``tests/security/scripted_agent.py``) sends thousands of
``session/request_permission`` requests at once and then withdraws every one
with ``$/cancel_request``. The edge relays each request to the client and, once
withdrawn, withdraws it from the client in turn. The client reads everything
(and answers nothing): it is not a slow client, and must not be closed as one —
it was (1008 "too many answers waiting"), because every withdrawal was a send of
its own, all at once, each counted as an answer waiting for the client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: (requests, seconds before they are withdrawn): later, and at once.
BURSTS = ((2000, 0.5), (3000, 0.0))


async def test_a_withdrawn_burst_of_permission_requests_keeps_a_reading_client(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        client = RawClient(await gw.connect(await gw.token("reader")))
        sid = (await client.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        for count, secs in BURSTS:
            seen, resp = await client.call("session/prompt",
                                           {"sessionId": sid, "prompt": f"burst {count} {secs}"})
            assert resp.get("result") == {"stopReason": "end_turn"}, resp
            assert [m["params"]["update"]["content"]["text"] for m in seen
                    if m.get("method") == "session/update"] == ["burst withdrawn"]
            asked = {m["id"] for m in seen if m.get("method") == "session/request_permission"}
            withdrawn = {m["params"]["requestId"] for m in seen
                         if m.get("method") == "$/cancel_request"}
            assert asked and withdrawn == asked  # every question the client saw, withdrawn
        # Still connected and served; never judged a slow client.
        assert await client.say(sid, "hi") == "echo: hi"
        assert not [e for e in gw.events() if e.get("event") == "ws_slow_client"]
        assert (await gw.metrics())["acpgate_ws_slow_client_closes_total"] == 0
        await client.ws.close()
