"""One token cannot take every session slot.

A real ``acpgate serve`` with ``max_sessions = 4`` and the default share
(``max_sessions`` divided among the two tokens: 2 each). Token A opens sessions
until its share is used up and then gets -32001 with the per-token message,
while token B still gets sessions; A's spawned child counts against A (spawning is refused at the share
as well), and closing gives A its slot back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MSG_SESSION_LIMIT_TOKEN
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.test_principals import call, tool_says

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FULL = {"code": -32001, "message": MSG_SESSION_LIMIT_TOKEN.format(max=2)}


def at_share(resp: dict[str, Any]) -> bool:
    """A -32001 for the token's share (the message goes on with the way out)."""
    error = resp.get("error") or {}
    return error.get("code") == FULL["code"] and \
        str(error.get("message", "")).startswith(FULL["message"])


async def test_a_token_gets_its_share_and_the_others_still_get_theirs(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, max_sessions=4) as gw:
        a = RawClient(await gw.connect(await gw.token("a")))
        b = RawClient(await gw.connect(await gw.token("b")))
        boss = (await a.result("session/new", {}))["sessionId"]
        second = (await a.result("session/new", {"agentAlias": "demo"}))["sessionId"]
        _, refused = await a.call("session/new", {"agentAlias": "demo"})
        assert at_share(refused), refused
        assert (await b.result("session/new", {"agentAlias": "demo"}))["sessionId"]

        # A spawned child is A's: with it, A is at its share again.
        await a.result("session/close", {"sessionId": second})
        out = json.loads(await tool_says(a, boss, call("sessions_spawn", agent="demo",
                                                       prompt="hi")))
        assert out["status"] == "completed", out
        _, refused = await a.call("session/new", {"agentAlias": "demo"})
        assert at_share(refused), refused
        again = await tool_says(a, boss, call("sessions_spawn", agent="demo", prompt="hi"))
        assert again == FULL["message"], again
        # ... and a restore of A's closed session counts the same way.
        _, refused = await a.call("session/resume", {"sessionId": second})
        assert at_share(refused), refused
        assert (await b.result("session/new", {"agentAlias": "demo"}))["sessionId"]

        # Closing gives the slots back (the child closes with its parent).
        await a.result("session/close", {"sessionId": boss})
        assert await a.result("session/resume", {"sessionId": second}) is not None
        await a.ws.close()
        await b.ws.close()
