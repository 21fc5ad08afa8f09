"""A client's answers to a question a re-adopted session asks again: only the answer to the
id this connection was asked reaches the agent, once.

After ``kill -9`` of edge worker 2 with an ``elicitation/create`` open, the restarted worker
asks the re-attached controller again under a fresh id. The controller first answers ids it
was never asked — the agent's own request id (read from the store: a client that learnt
it), a made-up ``zc-out-`` id, an integer, null — each with a form of its own; then the
id it was asked, and that id a second time. The agent gets exactly one answer, the one to
the id asked, under its own request id; a later prompt on the same session (the agent
reads its input in order) shows nothing else came.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.edge_worker_kill import WAIT, Stream
from tests.chaos.test_edge_worker_questions import (
    KILLED,
    answers_seen,
    ask_on_worker,
    drain,
    reattach,
)
from tests.gateway.workers_serve import Served, kill_worker, serve_workers
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def logged_request_id(served: Served) -> Any:
    """The agent's request id of the one question the store holds."""
    db = sqlite3.connect(served.cfg.data_dir / "sessions" / "acp-sessions.db")
    try:
        rows = db.execute("SELECT payload FROM event_chunks WHERE kind = 'permission'").fetchall()
    finally:
        db.close()
    asked = [body for (payload,) in rows
             if "answer" not in (body := json.loads(bytes(payload)))]
    assert len(asked) == 1, asked
    return asked[0]["requestId"]


def answer(msg_id: Any, name: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id,
                       "result": {"action": "accept", "content": {"name": name}}})


async def test_only_the_asked_id_answers_the_agent_once(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    agent_log = tmp_path / "agent.log"
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent_section("scripted", str(agent_log))) as served:
        client, sid, _ = await ask_on_worker(served, work, "elicit", "elicitation/create")
        agents_own = await asyncio.to_thread(logged_request_id, served)
        old = kill_worker(served, KILLED)
        await drain(client)

        again = await reattach(served, sid, old)
        stream = Stream(sid)
        asked = 0
        while stream.completed is None:
            msg = json.loads(await asyncio.wait_for(again.ws.recv(), WAIT))
            if msg.get("method") == "elicitation/create":
                asked += 1
                for forged in (agents_own, "zc-out-77", 0, 1, None):
                    await again.ws.send(answer(forged, "Mallory"))
                await again.ws.send(answer(msg["id"], "Ada"))
                await again.ws.send(answer(msg["id"], "Eve"))
                continue
            stream.see(msg)
        assert asked == 1
        texts = "".join(stream.chunks)
        assert '"Ada"' in texts and "Mallory" not in texts and "Eve" not in texts, texts

        echo = await again.send("session/prompt", {"sessionId": sid, "prompt": "after"})
        while True:
            msg = json.loads(await asyncio.wait_for(again.ws.recv(), WAIT))
            if msg.get("id") == echo and "method" not in msg:
                assert msg.get("result", {}).get("stopReason") == "end_turn", msg
                break
        assert answers_seen(agent_log) == [str(agents_own)], "one answer, under its own id"
        await again.ws.close()
