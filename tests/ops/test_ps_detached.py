"""``acpgate ps`` shows a detached session (a live session whose client dropped).

A gateway client's session outlives its dropped connection, detached for
``[gateway] detach_grace_secs``: ``acpgate ps`` shows it ``detached`` with no client
attached, and ``idle`` with one again once its owner's next connection loads it —
what the edge reports with its claim heartbeat (``SessionActivity.detached``,
``attached_clients``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.stack import RawClient
from tests.ops.test_ps import sessions_of, until
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_ps_shows_a_detached_session_and_its_clients(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        token = await gw.token("laptop")
        ws = await gw.connect(token)
        client = RawClient(ws)
        await client.result("initialize", {"protocolVersion": 1})
        sid = (await client.result("session/new", {"cwd": ""}))["sessionId"]
        await client.say(sid, "before the train's tunnel")
        report = await until(gw, lambda r: sessions_of(r).get(sid, {}).get("state") == "idle",
                             "the session idle")
        assert sessions_of(report)[sid]["clients"] == 1
        code, text, err = await gw.cli("ps")
        assert code == 0, err
        assert "CLIENTS" in text

        # A second screen joins as an observer: two clients; it leaves: one again.
        watcher_ws = await gw.connect(token)
        watcher = RawClient(watcher_ws)
        await watcher.result("initialize", {"protocolVersion": 1})
        await watcher.result("session/attach", {"sessionId": sid, "role": "observer",
                                                "historyPolicy": "none"})
        await until(gw, lambda r: sessions_of(r).get(sid, {}).get("clients") == 2,
                    "the observer counted")
        await watcher.result("session/detach", {"sessionId": sid})
        await until(gw, lambda r: sessions_of(r).get(sid, {}).get("clients") == 1,
                    "the observer gone")
        await watcher_ws.close()

        await ws.close()
        report = await until(gw, lambda r: sessions_of(r).get(sid, {}).get("state")
                             == "detached", "the session detached")
        assert sessions_of(report)[sid]["clients"] == 0

        ws = await gw.connect(token)
        client = RawClient(ws)
        await client.result("initialize", {"protocolVersion": 1})
        await client.result("session/load", {"sessionId": sid, "cwd": "", "mcpServers": []})
        report = await until(gw, lambda r: sessions_of(r).get(sid, {}).get("state") == "idle",
                             "the session attached again")
        assert sessions_of(report)[sid]["clients"] == 1
        await ws.close()
