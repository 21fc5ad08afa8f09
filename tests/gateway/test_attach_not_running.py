"""``session/attach`` of a session that is stored but runs nowhere — after a gateway restart.

A session detached when the gateway stopped is not live after the restart: attaching it
cannot work, and "Session not found" would send its owner looking for a session that is
right there. Its owner is told it is stored and how to bring it back (-32008, with
``data.acpgate.restoreWith``); ``session/load`` then does. Another token still gets exactly
the unknown-session answer (nothing about whether the id exists).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from services.common.protocol import SESSION_NOT_RUNNING
from tests.gateway.attach_client import cut
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_attach_after_a_restart_says_how_to_restore(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        owner, other = await gw.token("owner"), await gw.token("other")
        client = RawClient(await gw.connect(owner))
        sid = str((await client.result("session/new", {}))["sessionId"])
        assert "echo: kept" in await client.say(sid, "kept")
        cut(client.ws)  # detached when the gateway stops

    async with running_gateway(tmp_path) as gw:
        again = RawClient(await gw.connect(owner))
        _, answer = await again.call("session/attach", {"sessionId": sid})
        error = answer["error"]
        assert error["code"] == SESSION_NOT_RUNNING, answer
        assert "session/load" in error["message"] and "session/resume" in error["message"]
        assert "not found" not in error["message"].lower()
        assert error["data"] == {"sessionId": sid, "acpgate": {
            "stored": True, "restoreWith": ["session/load", "session/resume"]}}

        stranger = RawClient(await gw.connect(other))
        _, theirs = await stranger.call("session/attach", {"sessionId": sid})
        unknown = str(uuid.uuid4())
        _, nobody = await stranger.call("session/attach", {"sessionId": unknown})
        assert theirs["error"] == {k: (v.replace(unknown, sid) if isinstance(v, str) else v)
                                   for k, v in nobody["error"].items()}, (theirs, nobody)

        await again.result("session/load", {"sessionId": sid})
        assert "echo: back" in await again.say(sid, "back")
        await again.ws.close()
        await stranger.ws.close()
