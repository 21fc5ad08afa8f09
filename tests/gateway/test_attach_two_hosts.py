"""Attaching on host B to a session live on host A (issue 27, across hosts).

Two gateway hosts share one PostgreSQL store (``tests.gateway.test_two_hosts``). An edge
does not relay a client to another host's session: ``session/attach`` on B of a session A
serves answers -32007 naming where it lives (``data.acpgate.liveAt``: A's host name and
gateway instance id, from the row's claim) — to the session's own token only; any other
token hears what an unknown session answers. Once A let it go, B loads it as before.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from services.common.attach_protocol import SESSION_LIVE_ELSEWHERE
from tests.gateway.stack import full_stack
from tests.gateway.test_two_hosts import client, host_config
from tests.gateway.wsfixtures import mint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_attach_on_another_host_names_where_the_session_lives(
        tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)
    _, secret = mint(cfg_a, "alice")
    _, stranger = mint(cfg_a, "mallory")
    async with full_stack(cfg_a) as a, full_stack(cfg_b) as b:
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            assert (await on_a.result("session/prompt", {"sessionId": sid,
                                                         "prompt": "hi"}))["stopReason"]
            async with client(b, secret) as on_b:
                _, resp = await on_b.call("session/attach", {"sessionId": sid,
                                                             "role": "observer"})
                error = resp["error"]
                assert error["code"] == SESSION_LIVE_ELSEWHERE, error
                assert error["data"]["acpgate"]["liveAt"] == {
                    "host": a.runtime.claims.host,
                    "instanceId": a.runtime.claims.instance_id}, error
            async with client(b, stranger) as other:
                _, theirs = await other.call("session/attach", {"sessionId": sid})
                unknown = str(uuid.uuid4())
                _, nobody = await other.call("session/attach", {"sessionId": unknown})
                assert theirs["error"]["code"] == nobody["error"]["code"] == -32000
                assert theirs["error"]["message"].replace(sid, "?") == \
                    nobody["error"]["message"].replace(unknown, "?")
                assert "data" not in theirs["error"]
            # On A itself, a second connection simply attaches.
            async with client(a, secret) as second:
                result = await second.result("session/attach", {"sessionId": sid,
                                                                "historyPolicy": "none"})
                assert result["role"] == "controller"
            assert await on_a.result("session/close", {"sessionId": sid}) == {}
        async with client(b, secret) as on_b:  # nobody serves it now: B loads it
            _, loaded = await on_b.call("session/load", {"sessionId": sid})
            assert "result" in loaded, loaded
