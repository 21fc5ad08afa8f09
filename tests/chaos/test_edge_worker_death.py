"""A ``kill -9`` of one edge worker under streaming sessions loses no turn and no chunk.

A real ``acpgate serve`` with two edge workers, a streaming external agent and
WebSocket clients on worker 2 (8 sessions): while every turn streams, worker 2 is killed. Its
sessions' leases stay open (the lifecycle service keeps them and their pipes), serve
restarts the worker, and the new worker re-adopts the sessions, detached. Each client
reconnects with ``?worker=2`` and attaches after the last event id it saw: every chunk
arrives exactly once, the turn completes (``turn_complete``), no agent's PID changed,
and after serve stops no agent is left. A permission request open at the kill is asked
again of the client that re-attaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from tests.chaos.edge_worker_kill import (
    CHUNKS,
    WAIT,
    Stream,
    agent_pids,
    kill_and_reattach,
    room,
    start_streams,
)
from tests.chaos.lifecycle_kill import alive
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import (
    Served,
    client_on,
    dial,
    kill_worker,
    serve_workers,
    until,
    worker_pid,
)
from tests.security.procs import eventually
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SESSIONS = 8


async def test_kill9_of_an_edge_worker_loses_no_turn_and_no_chunk(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    gateway, acp = room(SESSIONS)
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600, gateway=gateway,
                             acp=acp, extra=agent_section("scripted")) as served:
        started = await start_streams(served, SESSIONS, work)
        before = agent_pids(served)
        assert len(before) == SESSIONS
        outcome, clients = await kill_and_reattach(served, started)
        assert outcome.mid_turn == SESSIONS, "the kill came mid-turn"
        assert outcome.failed == 0 and outcome.lost == 0 and outcome.duplicated == 0, outcome
        assert len(outcome.reattach_secs) == SESSIONS
        for _, stream in started:
            assert stream.chunks == [f"chunk {i} " for i in range(CHUNKS)], stream.session_id
            assert stream.completed is not None
            assert stream.completed.get("stopReason") == "end_turn"
        assert agent_pids(served) == before, "no agent died or was replaced"
        assert any(e.get("event") == "sessions_readopted" and e.get("adopted") == SESSIONS
                   for e in served.events())
        for client in clients:
            await client.ws.close()
        pids = list(before.values())
    await eventually(lambda: not alive(pids), WAIT, "every agent to be gone")


def logged_permission_requests(served: Served) -> int:
    """How many permission requests (not answers) the session store holds."""
    db = sqlite3.connect(served.cfg.data_dir / "sessions" / "acp-sessions.db")
    try:
        rows = db.execute("SELECT payload FROM event_chunks WHERE kind = 'permission'").fetchall()
    finally:
        db.close()
    return sum(1 for (payload,) in rows if "answer" not in json.loads(bytes(payload)))


async def test_a_permission_request_open_at_the_kill_is_asked_again(tmp_path: Path) -> None:
    """The agent asked the worker that died; the re-attached client is asked the same
    question under a new id, and its answer reaches the agent under the agent's own."""
    work = tmp_path / "work"
    work.mkdir()
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent_section("scripted")) as served:
        client = await client_on(served, 2)
        assert client is not None
        sid = (await client.result("session/new", {"cwd": str(work),
                                                   "agentAlias": "scripted"}))["sessionId"]
        await client.send("session/prompt", {"sessionId": sid, "prompt": "ask"})
        first = None
        while first is None:
            msg = json.loads(await asyncio.wait_for(client.ws.recv(), WAIT))
            if msg.get("method") == "session/request_permission":
                first = msg
        await until(lambda: asyncio.to_thread(logged_permission_requests, served),
                    "the request to be logged")
        before = agent_pids(served)
        old = kill_worker(served, 2)
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            while True:
                await asyncio.wait_for(client.ws.recv(), WAIT)

        async def restarted() -> bool:
            with contextlib.suppress(KeyError):
                return worker_pid(served, 2) != old and (await served.health_status())[0] == 200
            return False
        await until(restarted, "worker 2 serving again", tries=1200)

        again = RawClient(await dial(served, query="worker=2"))
        await again.result("initialize", {"protocolVersion": 1})
        await again.send("session/attach", {"sessionId": sid, "role": "controller",
                                            "historyPolicy": "after_message",
                                            "afterMessageId": 0})
        stream = Stream(sid)
        asked: dict[str, Any] | None = None
        while stream.completed is None:
            msg = json.loads(await asyncio.wait_for(again.ws.recv(), WAIT))
            if msg.get("method") == "session/request_permission":
                assert asked is None, "asked once"
                asked = msg
                await again.ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "outcome": {"outcome": "selected", "optionId": "allow"}}}))
                continue
            stream.see(msg)
        assert asked is not None
        assert asked["params"]["sessionId"] == sid
        assert asked["params"]["toolCall"] == first["params"]["toolCall"]
        assert asked["params"]["options"] == first["params"]["options"]
        assert stream.completed.get("stopReason") == "end_turn"
        texts = "".join(stream.chunks)
        assert '"optionId": "allow"' in texts and '"selected"' in texts, texts
        assert agent_pids(served) == before, "the agent was not replaced"
        await again.ws.close()
        pids = list(before.values())
    await eventually(lambda: not alive(pids), WAIT, "every agent to be gone")
