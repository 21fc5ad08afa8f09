"""Another principal's session is reported exactly like one that does not exist.

Token A asking ``session/load`` or ``session/resume`` for token B's *active*
session got "Session already active: <id>", which tells A that the id exists
and is in use. It must get what an unknown id gets: -32000 ``Session not
found: <id>`` (SPEC §8 "visible to the caller", §14). B itself keeps SPEC §8's
order: a load of its own active session is -32602 "already active"; a resume of it
answers at once with the session's state (as the agent itself would).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def error_of(client: RawClient, method: str, sid: str) -> dict[str, Any]:
    _, resp = await client.call(method, {"sessionId": sid})
    assert "error" in resp, resp
    return dict(resp["error"])


async def test_another_tokens_active_session_looks_unknown(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        a = RawClient(await gw.connect(await gw.token("a")))
        b = RawClient(await gw.connect(await gw.token("b")))
        active = (await b.result("session/new", {"agentAlias": "demo"}))["sessionId"]
        stored = (await b.result("session/new", {"agentAlias": "demo"}))["sessionId"]
        await b.result("session/close", {"sessionId": stored})
        unknown = str(uuid.uuid4())
        for method in ("session/load", "session/resume"):
            expected = await error_of(a, method, unknown)
            assert expected == {"code": -32000, "message": f"Session not found: {unknown}"}
            for sid in (active, stored):
                got = await error_of(a, method, sid)
                assert got == {"code": -32000, "message": f"Session not found: {sid}"}, got
            # The owner still hears SPEC §8's answer for a load of its own active session;
            # its resume is idempotent — for the owner's connection only.
            if method == "session/load":
                own = await error_of(b, method, active)
                assert own == {"code": -32602, "message": f"Session already active: {active}. "
                                                          "Call session/close first."}
            else:
                assert "modes" in await b.result(method, {"sessionId": active})
        # Nothing was disturbed: B's session still answers B.
        result = await b.result("session/prompt", {"sessionId": active, "prompt": "still mine"})
        assert result["stopReason"] == "end_turn"
        await a.ws.close()
        await b.ws.close()
