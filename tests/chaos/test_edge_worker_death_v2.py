"""A ``kill -9`` of an edge worker mid-turn on a v2 agent: the re-adopted session is still
translated, and its turn completes for v1 and v2 clients alike.

A real ``acpgate serve`` with two edge workers and the v2 test agent (``protocol = 2``,
and ``"auto"``, where only the alias's recorded profile says the agent answered v2): a v1 client
and a v2 client on worker 2 each start a streaming turn (a tool call, then chunks); worker
2 is killed mid-turn and serve restarts it, which re-adopts both sessions without asking
the agent ``initialize`` again. The v1 client re-attaches after the last event it saw and
the v2 client resumes by acpgate's event cursor: each sees every chunk exactly once, the
tool call created once (a later update of it is no second ``tool_call``), the turn's end
in its own version's terms (v1 ``turn_complete``; v2 ``state_update`` idle), and none of
the agent's raw v2 forms reach the v1 client.

The version is the session's own, recorded on its row when its agent was started: an
``"auto"`` alias whose recorded profile says v1 by the time of the kill (its adapter
upgraded meanwhile) still has its live v2 session translated as v2.
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

from tests.chaos.test_edge_worker_death import agent_pids
from tests.gateway.attach_client import event_id, kind
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import (
    client_on,
    dial,
    kill_worker,
    on_worker,
    serve_workers,
    until,
    worker_pid,
)
from tests.v2_agent import agent_section, received
from tests.v2schema import check_sent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CHUNKS = 80
WAIT = 60.0
INIT_V2 = {"protocolVersion": 2, "info": {"name": "v2-readopt-test", "version": "1"}}
#: What a v2 agent sends and v1 has no such kind for: never relayed to a v1 client as is.
V2_ONLY = {"tool_call_content_chunk", "plan_update", "user_message", "replay_complete"}


class Seen:
    """What one client saw of its session's turn."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.chunks: list[str] = []
        self.kinds: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.last_event = 0
        self.end: dict[str, Any] | None = None

    def see(self, msg: dict[str, Any], v2: bool) -> None:
        if msg.get("method") != "session/update":
            return
        update = msg["params"]["update"]
        number = event_id(msg)
        if number is not None:
            self.last_event = max(self.last_event, number)
        what = kind(msg)
        self.kinds.append(what)
        if what == "agent_message_chunk":
            self.chunks.append(update["content"]["text"])
        elif what in ("tool_call", "tool_call_update"):
            self.tool_calls.append(update)
        elif self.end is None and what == ("state_update" if v2 else "turn_complete") and (
                not v2 or update.get("state") == "idle"):
            # The first idle is the turn's end; a v2 resume's closing current state (idle
            # without a stop reason once the turn is over) comes after it, never instead.
            self.end = update


async def read(ws: Any, v2: bool) -> dict[str, Any]:
    msg: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    if v2 and "method" in msg:
        check_sent(msg, None)
    return msg


async def read_until(ws: Any, seen: Seen, v2: bool, enough: int) -> None:
    while len(seen.chunks) < enough:
        seen.see(await read(ws, v2), v2)


async def drain(ws: Any, seen: Seen, v2: bool) -> None:
    """What the killed worker still sent, until its connection is gone."""
    with contextlib.suppress(ConnectionClosed, TimeoutError):
        while True:
            seen.see(await read(ws, v2), v2)


async def v2_client(served: Any) -> Any:
    """A v2 WebSocket client on worker 2, initialized."""
    with on_worker(served, 2):
        ws = await dial(served)
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                  "params": INIT_V2}))
        answer = await read(ws, True)
    assert answer["result"]["protocolVersion"] == 2, answer
    return ws


async def call(ws: Any, seen: Seen | None, v2: bool, req_id: int, method: str,
               params: dict[str, Any]) -> Any:
    """A request; the notifications before its answer go to ``seen``."""
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method,
                              "params": params}))
    while True:
        msg = await read(ws, v2)
        if msg.get("id") == req_id and "method" not in msg:
            assert "result" in msg, msg
            return msg["result"]
        if seen is not None:
            seen.see(msg, v2)


def check_turn(seen: Seen, v2: bool) -> None:
    assert seen.chunks == [f"chunk {i} " for i in range(CHUNKS)], seen.session_id
    assert seen.end is not None and seen.end.get("stopReason") == "end_turn", seen.end
    created = [u for u in seen.tool_calls if u["sessionUpdate"] == "tool_call"]
    if v2:  # the agent's own upserts: one creates the call, the last completes it
        assert seen.tool_calls[0].get("title") == "Stream", seen.tool_calls
    else:
        assert [u["toolCallId"] for u in created] == ["t-s"], seen.tool_calls
        assert not (V2_ONLY | {"state_update"}) & set(seen.kinds), seen.kinds
    assert seen.tool_calls[-1]["toolCallId"] == "t-s"
    assert seen.tool_calls[-1].get("status") == "completed", seen.tool_calls


async def turn_ended(served: Any, session_id: str) -> bool:
    """The re-adopting worker ended ``session_id``'s turn (its end is logged and stored)."""
    return any(e.get("event") == "adopted_turn_ended" and e.get("session_id") == session_id
               for e in await asyncio.to_thread(served.events))


@pytest.mark.parametrize(("protocol", "resume_after_end"),
                         [('"auto"', False), ("2", False), ("2", True)])
async def test_kill9_mid_turn_on_a_v2_agent_keeps_translating(
        tmp_path: Path, protocol: str, resume_after_end: bool) -> None:
    """``resume_after_end``: the v2 client resumes only once the re-adopted turn ended, so
    the replay holds the turn's end, then ``replay_complete`` and the idle current state;
    otherwise whenever it comes (mid-turn, or during the replay, in practice)."""
    work = tmp_path / "work"
    work.mkdir()
    agent = agent_section("two", str(tmp_path / "agent.log"), "v2", protocol)
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent) as served:
        v1 = await client_on(served, 2)
        assert v1 is not None
        v1_sid = (await v1.result("session/new", {"cwd": str(work), "agentAlias": "two"})
                  )["sessionId"]
        v1_seen = Seen(v1_sid)
        await v1.send("session/prompt", {"sessionId": v1_sid, "prompt": f"stream {CHUNKS}"})
        v2 = await v2_client(served)
        v2_sid = (await call(v2, None, True, 1, "session/new", {
            "cwd": str(work), "agentAlias": "two"}))["sessionId"]
        v2_seen = Seen(v2_sid)
        await call(v2, v2_seen, True, 2, "session/prompt", {
            "sessionId": v2_sid, "prompt": [{"type": "text", "text": f"stream {CHUNKS}"}]})
        await asyncio.gather(read_until(v1.ws, v1_seen, False, 5),
                             read_until(v2, v2_seen, True, 5))
        before = agent_pids(served)
        old = kill_worker(served, 2)
        await asyncio.gather(drain(v1.ws, v1_seen, False), drain(v2, v2_seen, True))
        assert len(v1_seen.chunks) < CHUNKS and len(v2_seen.chunks) < CHUNKS, "mid-turn"

        async def restarted() -> bool:
            with contextlib.suppress(KeyError):
                return worker_pid(served, 2) != old and (await served.health_status())[0] == 200
            return False
        await until(restarted, "worker 2 serving again", tries=1200)

        # The v1 client re-attaches after the last event it saw.
        again = RawClient(await dial(served, query="worker=2"))
        await again.result("initialize", {"protocolVersion": 1})
        attached = await call(again.ws, v1_seen, False, 900, "session/attach", {
            "sessionId": v1_sid, "role": "controller", "historyPolicy": "after_message",
            "afterMessageId": v1_seen.last_event})
        assert attached["historyPolicy"] == "after_message", attached
        while v1_seen.end is None:
            v1_seen.see(await read(again.ws, False), False)
        check_turn(v1_seen, False)

        # The v2 client resumes by acpgate's cursor, just after the last event it saw.
        if resume_after_end:
            await until(lambda: turn_ended(served, v2_sid), "the v2 turn ended", tries=1200)
        with on_worker(served, 2):
            back = await dial(served, query="worker=2")
            await back.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                        "params": INIT_V2}))
            await read(back, True)
        await call(back, v2_seen, True, 1, "session/resume", {
            "sessionId": v2_sid, "cwd": str(work),
            "replayFrom": {"type": "_acpgate_event", "eventId": v2_seen.last_event + 1}})
        while v2_seen.end is None:
            v2_seen.see(await read(back, True), True)
        check_turn(v2_seen, True)
        if resume_after_end:  # all of it in the replay, before the resume's answer
            assert v2_seen.kinds[-2:] == ["replay_complete", "state_update"], v2_seen.kinds

        assert agent_pids(served) == before, "no agent died or was replaced"
        asked = [m for m in received(str(tmp_path / "agent.log"))
                 if m.get("method") == "initialize"]
        assert len(asked) == 2, "each adapter was asked initialize once, before the kill"
        assert any(e.get("event") == "sessions_readopted" and e.get("adopted") == 2
                   for e in served.events())
        await again.ws.close()
        await back.close()
        await v1.ws.close()


def record_v1_profile(served: Any, alias: str) -> None:
    """The alias's recorded profile says its adapter answered ``initialize`` with v1 (as
    after an upgrade); the session rows keep what they recorded."""
    db = sqlite3.connect(served.cfg.data_dir / "sessions" / "acp-sessions.db", timeout=30)
    try:
        (text,), = db.execute("SELECT capabilities_json FROM agent_capabilities WHERE alias = ?",
                              (alias,)).fetchall()
        profile = json.loads(text)
        assert profile.get("protocolVersion") == 2, profile
        profile["protocolVersion"] = 1
        with db:
            db.execute("UPDATE agent_capabilities SET capabilities_json = ? WHERE alias = ?",
                       (json.dumps(profile), alias))
    finally:
        db.close()


def recorded_protocol(served: Any, session_id: str) -> int:
    """The protocol version the session's row recorded."""
    db = sqlite3.connect(served.cfg.data_dir / "sessions" / "acp-sessions.db", timeout=30)
    try:
        (version,), = db.execute("SELECT protocol_version FROM sessions WHERE id = ?",
                                 (session_id,)).fetchall()
    finally:
        db.close()
    return int(version)


async def test_readopted_session_keeps_its_own_protocol_when_the_profile_changed(
        tmp_path: Path) -> None:
    """A session started on v2 under ``protocol = "auto"``; the alias's recorded profile then
    says v1; worker 2 is killed mid-turn: the re-adopted session is still translated as v2
    (its v1 client gets every chunk once, the call created once, ``turn_complete``)."""
    work = tmp_path / "work"
    work.mkdir()
    agent = agent_section("two", str(tmp_path / "agent.log"), "v2", '"auto"')
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent) as served:
        v1 = await client_on(served, 2)
        assert v1 is not None
        sid = (await v1.result("session/new", {"cwd": str(work), "agentAlias": "two"})
               )["sessionId"]
        seen = Seen(sid)
        await v1.send("session/prompt", {"sessionId": sid, "prompt": f"stream {CHUNKS}"})
        await read_until(v1.ws, seen, False, 5)
        assert recorded_protocol(served, sid) == 2
        record_v1_profile(served, "two")
        old = kill_worker(served, 2)
        await drain(v1.ws, seen, False)
        assert len(seen.chunks) < CHUNKS, "mid-turn"

        async def restarted() -> bool:
            with contextlib.suppress(KeyError):
                return worker_pid(served, 2) != old and (await served.health_status())[0] == 200
            return False
        await until(restarted, "worker 2 serving again", tries=1200)
        again = RawClient(await dial(served, query="worker=2"))
        await again.result("initialize", {"protocolVersion": 1})
        await call(again.ws, seen, False, 900, "session/attach", {
            "sessionId": sid, "role": "controller", "historyPolicy": "after_message",
            "afterMessageId": seen.last_event})
        while seen.end is None:
            seen.see(await read(again.ws, False), False)
        check_turn(seen, False)
        assert any(e.get("event") == "sessions_readopted" and e.get("adopted") == 1
                   for e in served.events())
        await again.ws.close()
        await v1.ws.close()
