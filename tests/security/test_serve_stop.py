"""Ctrl-C on ``acpgate serve`` with a turn running.

The stop never closes every WebSocket at once (1001) to wait, without a word, up to
15 s for the requests those connections had read — a running turn would go on until
it ended or the wait ran out, and its client would never get the prompt's answer.
The edge says what it waits for, cancels the running turns (ACP
``session/cancel``), so each client gets its prompt's result (``stopReason:
cancelled``) before its connection closes with 1001, and the wait ends as soon as
everything read is answered. A real ``acpgate serve``, a real WebSocket client, a
turn whose shell command would run for a minute, SIGINT to serve (a terminal's
Ctrl-C reaches serve only: its children have process groups of their own). A
Streamable HTTP client gets the same: the answer on its session stream, then the end.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.exceptions import ConnectionClosed

from tests.gateway.stack import RawClient
from tests.gateway.streamable_client import RemoteClient
from tests.security.gateway_stack import WAIT, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def is_update(msg: dict[str, Any], kind: str) -> bool:
    return msg.get("method") == "session/update" and \
        msg["params"]["update"].get("sessionUpdate") == kind


async def test_ctrl_c_cancels_the_running_turn_and_answers_it_before_the_close(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("stopper")
        project = tmp_path / "project"
        project.mkdir()
        client = RawClient(await gw.connect(token))
        sid = (await client.result("session/new", {"agentAlias": "demo",
                                                   "cwd": str(project)}))["sessionId"]
        prompt = await client.send("session/prompt", {"sessionId": sid,
                                                      "prompt": "!sleep 60"})
        while not is_update(json.loads(await client.ws.recv()), "tool_call"):
            pass  # the shell command runs
        tree = psutil.Process(gw.proc.pid).children(recursive=True)

        gw.proc.send_signal(signal.SIGINT)
        received: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                received.append(json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)))
        answers = [m for m in received if m.get("id") == prompt and "method" not in m]
        assert answers, received  # the prompt was answered before the close ...
        assert answers[0].get("result", {}).get("stopReason") == "cancelled", answers
        assert any(is_update(m, "tool_call") and "turn-cancelled" in json.dumps(m)
                   for m in received), received
        rcvd = closed.value.rcvd
        assert rcvd is not None and rcvd.code == 1001, closed.value  # ... then going away

        assert await asyncio.wait_for(gw.proc.wait(), WAIT) == 0
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, f"left behind: {alive}"
        events = gw.events()
        stopping = [e for e in events if e.get("event") == "connection_stopping"]
        assert stopping and stopping[0]["cancelled_turns"] == [sid], stopping
        assert stopping[0]["requests"] >= 1 and stopping[0]["wait_secs"] > 0, stopping
        # The wait ended because everything read was answered, not because it ran out.
        (quiet,) = [e for e in events if e.get("event") == "connection_quiet"]
        assert quiet["unanswered"] == 0, quiet
        assert [e for e in events if e.get("event") == "edge_stopping"], events[-20:]
        assert not [e for e in events if e.get("event") == "edge_stop_closing_late_connections"]
        log = gw.log.read_text(errors="replace")
        assert "Traceback" not in log and "Exception in callback" not in log, log[-4000:]


async def test_ctrl_c_answers_a_streamable_http_turn_before_its_streams_end(
        tmp_path: Path) -> None:
    """The same stop for a Streamable HTTP client: its prompt's ``cancelled``
    answer comes on the session stream, then every stream of the connection ends."""
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("stopper")
        project = tmp_path / "project"
        project.mkdir()
        client = RemoteClient(f"http://127.0.0.1:{gw.port}/acp", token.secret)
        try:
            await client.initialize()
            async with client.stream() as conn_stream:
                await client.post({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                                   "params": {"agentAlias": "demo", "cwd": str(project)}})
                sid = (await conn_stream.next()).data["result"]["sessionId"]
                async with client.stream(session=sid) as stream:
                    await client.post({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                       "params": {"sessionId": sid, "prompt": "!sleep 60"}},
                                      session=sid)
                    await stream.until(lambda m: is_update(m, "tool_call"))
                    gw.proc.send_signal(signal.SIGINT)
                    received = []
                    with pytest.raises(EOFError):
                        while True:
                            received.append((await asyncio.wait_for(stream.next(), WAIT)).data)
                    answers = [m for m in received if m.get("id") == 2]
                    assert answers and answers[0]["result"]["stopReason"] == "cancelled", received
                with pytest.raises(EOFError):  # the connection stream ends too
                    await asyncio.wait_for(conn_stream.next(), WAIT)
            assert await asyncio.wait_for(gw.proc.wait(), WAIT) == 0
            log = gw.log.read_text(errors="replace")
            assert "Traceback" not in log and "Exception in callback" not in log, log[-4000:]
        finally:
            await client.aclose()
