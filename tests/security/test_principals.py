"""Visibility never crosses gateway tokens; a grant reads, it never drives.

A real ``acpgate serve`` with ``[sessions] visibility = "all"`` (a2a on) or
``"agent"``, three tokens. Token B's client has a live session (holding a
secret) and a closed one. Token A's agent — the attacker's model, calling the
real session tools — lists, reads, asks the status of and sends into B's
sessions, and A's client loads, resumes and deletes them: every attempt is
answered exactly like a session that does not exist, B's token id and secret
never reach A, B's client is asked nothing, nothing runs in B's sessions, and
B still has both. Then the operator grants A's token ``see-all``: A (client and
agent) may list and read B's sessions, and still may not send, load, resume or
delete; a third token C sees only its own throughout; ``revoke-grant`` takes
the sight away again at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.stack import RawClient, select
from tests.security.fake_model import RESULT_MARKER
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: The session tools answer A's agent without asking (supervised: the shell still asks).
AUTO_APPROVE = 'auto_approve = ["sessions_*", "session_status"]\n'
SECRET = "swordfish-7f3a"


def call(tool: str, **args: Any) -> str:
    """The prompt that makes the attacker's model call ``tool`` with ``args``."""
    return f"call {tool} {json.dumps(args)}"


async def tool_says(client: RawClient, sid: str, prompt: str) -> str:
    """Run ``prompt`` in session ``sid``; the output of the one tool the model called."""
    result = await client.result("session/prompt", {"sessionId": sid, "prompt": prompt})
    content = str(result["content"])
    assert content.startswith(RESULT_MARKER), content
    return content[len(RESULT_MARKER):]


async def listed_by_agent(client: RawClient, sid: str) -> set[str]:
    out = json.loads(await tool_says(client, sid, call("sessions_list", limit=100)))
    return {row["sessionId"] for row in out["sessions"]}


async def listed_by_client(client: RawClient) -> set[str]:
    return {s["sessionId"] for s in (await client.result("session/list", {}))["sessions"]}


async def refused_like_missing(client: RawClient, method: str, sid: str) -> None:
    _, resp = await client.call(method, {"sessionId": sid})
    assert resp.get("error") == {"code": -32000, "message": f"Session not found: {sid}"}, resp


async def cannot_drive(gw: Gateway, a: RawClient, a_sid: str, b_live: str, b_closed: str,
                       ) -> list[str]:
    """A's agent sends into B's live and closed sessions, A's client loads, resumes and
    deletes them: all "not found". Returns what A's agent was told."""
    told = []
    for sid in (b_live, b_closed):
        marker = gw.home / f"driven-{sid}"
        out = await tool_says(a, a_sid, call("sessions_send", sessionId=sid, wait=False,
                                             message=f"shell touch {marker}"))
        assert out == f"Session not found: {sid}", out
        assert not marker.exists()
        told.append(out)
        for method in ("session/load", "session/resume", "session/delete"):
            await refused_like_missing(a, method, sid)
    return told


@pytest.mark.parametrize("visibility", ["all", "agent"])
async def test_an_agent_never_reaches_another_tokens_sessions(tmp_path: Path,
                                                              visibility: str) -> None:
    extra = f'\n[sessions]\nvisibility = "{visibility}"\n\n[a2a]\nenabled = true\n'
    async with running_gateway(tmp_path, autonomy="supervised", autonomy_extra=AUTO_APPROVE,
                               extra=extra) as gw:
        ta, tb, tc = (await gw.token("a"), await gw.token("b"), await gw.token("c"))
        a = RawClient(await gw.connect(ta), select("allow-once"))
        b = RawClient(await gw.connect(tb), select("reject-once"))
        c = RawClient(await gw.connect(tc), select("allow-once"))
        b_live = (await b.result("session/new", {}))["sessionId"]
        await b.result("session/prompt", {"sessionId": b_live, "prompt": f"the secret {SECRET}"})
        b_closed = (await b.result("session/new", {}))["sessionId"]
        await b.result("session/prompt", {"sessionId": b_closed, "prompt": f"also {SECRET}"})
        await b.result("session/close", {"sessionId": b_closed})
        a_sid = (await a.result("session/new", {}))["sessionId"]
        c_sid = (await c.result("session/new", {}))["sessionId"]

        # No grant: nothing of B's reaches A, whichever way A asks.
        assert await listed_by_agent(a, a_sid) == {a_sid}
        assert await listed_by_client(a) == {a_sid}
        told = []
        for sid in (b_live, b_closed):
            for tool in ("sessions_history", "session_status"):
                out = await tool_says(a, a_sid, call(tool, sessionId=sid))
                assert out == f"Session not found: {sid}", (tool, out)
                told.append(out)
        told += await cannot_drive(gw, a, a_sid, b_live, b_closed)
        assert not any(SECRET in t or tb.token_id in t for t in told)

        # The operator grants A's token see-all: A reads B's sessions, drives none.
        await gw.grant(ta, "see-all")
        assert {b_live, b_closed} <= await listed_by_agent(a, a_sid)
        assert {a_sid, b_live, b_closed, c_sid} == await listed_by_client(a)
        history = await tool_says(a, a_sid, call("sessions_history", sessionId=b_live))
        assert SECRET in history
        status = json.loads(await tool_says(a, a_sid, call("session_status", sessionId=b_closed)))
        assert status["owner"] == f"client:{tb.token_id}" and status["state"] == "closed"
        await cannot_drive(gw, a, a_sid, b_live, b_closed)

        # A third token sees only its own, grant or no grant elsewhere.
        assert await listed_by_agent(c, c_sid) == {c_sid}
        assert await listed_by_client(c) == {c_sid}
        out = await tool_says(c, c_sid, call("sessions_history", sessionId=b_live))
        assert out == f"Session not found: {b_live}"

        # revoke-grant: the sight is gone at once.
        await gw.grant(ta, "see-all", revoke=True)
        assert await listed_by_agent(a, a_sid) == {a_sid}
        assert await listed_by_client(a) == {a_sid}

        # B was asked nothing, and still has both sessions, the live one still its own.
        assert await listed_by_client(b) == {b_live, b_closed}
        result = await b.result("session/prompt", {"sessionId": b_live, "prompt": "still mine"})
        assert result["content"] == "echo: still mine"
        assert b.requests == [], b.requests
        for client in (a, b, c):
            await client.ws.close()
