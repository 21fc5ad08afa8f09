"""A hostile v2 agent naming fresh ids without end, against a real ``acpgate serve``.

The agent (``tests/v2_agent.py``, mode ``grow``) answers ``session/new`` only after a
hundred thousand updates naming sessions acpgate never set up, each announcing a child:
the edge keeps a bounded few of them (it grew by some 100 MiB keeping each, and relayed
and stored every one — a hundred thousand children — until the session's store gave up),
and the session works. Turns of a hundred thousand tool calls of fresh ids and of a tool
call's thousand content chunks (``grow <n> <m>``) leave the edge's memory where it was,
and a v1 client's view of the chunked call stops at the bound of chunks (the translation's
maps themselves: ``test_v2_agent_ids``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from services.common.acp.v2.names import MAX_AGENT_SESSIONS, MAX_CALL_CONTENT_CHUNKS
from tests.gateway.attach_client import initialize
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.v2_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_CALLS = 100_000
_CHUNKS = 1_000
#: What the edge may grow by across a flood (its state per id would be tens of MiB).
_SLACK_BYTES = 16 * 1024 * 1024


def _updates(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in seen if m.get("method") == "session/update"]


async def test_an_agent_cannot_grow_the_edge_with_fresh_ids(tmp_path: Path) -> None:
    log = str(tmp_path / "agent.log")
    extra = agent_section("grow", log, "grow", '"auto"') + agent_section("two", log, "v2", '"auto"')
    async with running_gateway(tmp_path, extra=extra) as gw:
        client = RawClient(await gw.connect(await gw.token("victim")))
        await client.result("initialize", initialize("victim"))
        edge = psutil.Process(gw.edge_pid())

        async def prompt(sid: str, text: str) -> list[dict[str, Any]]:
            seen, resp = await client.call("session/prompt", {
                "sessionId": sid, "prompt": [{"type": "text", "text": text}]})
            assert resp["result"]["stopReason"] == "end_turn", resp
            return _updates(seen)

        def grown_since(before: int) -> str:
            grown = edge.memory_info().rss - before
            return "" if grown < _SLACK_BYTES else f"the edge grew by {grown / 2**20:.1f} MiB"

        # Made-up sessions before the answer to session/new: a first session warms the
        # edge's allocator, a second one's are measured.
        await client.result("session/new", {"agentAlias": "grow"})
        before = edge.memory_info().rss
        sid = (await client.result("session/new", {"agentAlias": "grow"}))["sessionId"]
        assert not grown_since(before)
        # At most the bound's worth of them reached the session (an adapter's updates
        # before its session is set up are its session's), and the session works.
        updates = await prompt(sid, "hello")
        assert sum("boo" in str(u) for u in updates) <= MAX_AGENT_SESSIONS
        assert any(u["sessionUpdate"] == "agent_message_chunk"
                   and u["content"].get("text") == "echo: hello" for u in updates)

        # Fresh tool call ids and chunks in turns: a first turn fills the session's event
        # log ring, the next ones are measured.
        sid = (await client.result("session/new", {"agentAlias": "two"}))["sessionId"]
        flood = f"grow {_CALLS} {_CHUNKS}"
        await prompt(sid, flood)
        before = edge.memory_info().rss
        updates = await prompt(sid, flood) + await prompt(sid, flood)
        assert not grown_since(before)
        assert sum(u["sessionUpdate"] == "tool_call" for u in updates) >= 2 * _CALLS
        chunked = [u for u in updates if str(u.get("toolCallId")).endswith("-chunked")
                   and "content" in u]
        assert max(len(u["content"]) for u in chunked) == MAX_CALL_CONTENT_CHUNKS
        assert any(u["sessionUpdate"] == "agent_message_chunk"
                   and u["content"].get("text") == "grown" for u in updates)
        await client.ws.close()
