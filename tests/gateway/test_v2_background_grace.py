"""A detached session whose v2 agent reports background work outlives its grace.

A real ``acpgate serve`` with ``detach_grace_secs = 1`` and the v2 test agent
(``tests/v2_agent.py``): after a turn that leaves a tool call running in the background
(``bg``), the client is cut. Several graces later the session is still held (no
``session_detach_expired``); a new connection resumes it and cancels the background
call (``tool_call/cancel``, relayed to the agent; the resume's state carries the agent's
list); once the agent reports its list empty
and that connection is cut too, the grace runs out and the session is released.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.gateway.attach_client import cut, initialize
from tests.gateway.stack import RawClient
from tests.gateway.test_detach import active_sessions, until
from tests.security.gateway_stack import running_gateway
from tests.v2_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def test_background_work_keeps_a_detached_session_until_it_ends(tmp_path: Path) -> None:
    extra = agent_section("two", str(tmp_path / "agent.log"), "v2", '"auto"')
    async with running_gateway(tmp_path, extra=extra, gateway="detach_grace_secs = 1\n") as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        await first.result("initialize", initialize("laptop"))
        sid = (await first.result("session/new", {"agentAlias": "two"}))["sessionId"]
        _, resp = await first.call("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "bg"}]})
        assert resp["result"]["stopReason"] == "end_turn", resp
        cut(first.ws)

        async def detached() -> bool:
            return any(e.get("event") == "session_detached" for e in gw.events())
        await until(detached, "the session detached")
        await asyncio.sleep(3)  # three graces: background work keeps it
        assert not any(e.get("event") == "session_detach_expired" for e in gw.events())
        assert await active_sessions(gw) == 1

        # A v2 client resuming it gets the agent's list on the state before the answer.
        again = RawClient(await gw.connect(token))
        await again.result("initialize", {"protocolVersion": 2,
                                          "info": {"name": "laptop", "version": "1"}})
        before, resumed = await again.call("session/resume", {
            "sessionId": sid, "cwd": "/", "mcpServers": []})  # cwd: checked, not used
        assert "result" in resumed, resumed
        states = [m["params"]["update"] for m in before if m.get("method") == "session/update"
                  and m["params"]["update"]["sessionUpdate"] == "state_update"]
        assert states[-1]["background"] == [{"type": "tool_call", "toolCallId": "t-bg"}]
        assert await again.result("tool_call/cancel", {"sessionId": sid,
                                                       "toolCallId": "t-bg"}) == {}
        cut(again.ws)

        async def released() -> bool:
            return await active_sessions(gw) == 0
        await until(released, "the session released once its background work ended")
        assert any(e.get("event") == "session_detach_expired" for e in gw.events())
