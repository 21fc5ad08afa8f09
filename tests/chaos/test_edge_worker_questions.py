"""An edge worker's ``kill -9`` while the agent asks the human: asked again exactly when the
agent has no answer, and the agent never gets two answers to one request.

A real ``acpgate serve`` with two edge workers and the scripted agent, its client on worker 2:

- an ``elicitation/create`` open at the kill is asked again of the client that
  re-attaches (the same form, a new id) — a v1 client attaching after a message, a v2
  client resuming by acpgate's event cursor; its answer reaches the agent once, under the
  agent's own id, and the turn completes;
- a permission request whose answer the agent already got when the worker died is not
  asked again: the agent kills worker 2 itself the moment the answer arrives (``ask kill
  <pid>``), and the session service is stopped (SIGSTOP) while the client answers, so an
  answer written to the agent before it was stored would still be unstored at the kill.
  After re-adoption the request is not open, the agent got one answer and the turn
  completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.exceptions import ConnectionClosed

from tests.chaos.edge_worker_kill import WAIT, Stream, agent_pids
from tests.chaos.lifecycle_kill import alive
from tests.chaos.test_edge_worker_death import logged_permission_requests
from tests.chaos.test_edge_worker_death_v2 import INIT_V2, Seen, call, read, v2_client
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import (
    Served,
    client_on,
    dial,
    kill_worker,
    on_worker,
    serve_workers,
    until,
    worker_pid,
)
from tests.security.procs import eventually
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: The worker the session runs on, and that dies.
KILLED = 2


def answers_seen(agent_log: Path) -> list[str]:
    """The request ids of every answer the scripted agent received, in order."""
    if not agent_log.exists():
        return []
    return [line.split()[1] for line in agent_log.read_text().splitlines()
            if line.startswith("answer ")]


def session_service(served: Served) -> psutil.Process:
    """serve's session service process."""
    for child in psutil.Process(served.proc.pid).children():
        with contextlib.suppress(psutil.Error):
            if "session-service" in child.cmdline():
                return child
    raise AssertionError("no session service among serve's children")


async def ask_on_worker(served: Served, work: Path, prompt: str,
                        method: str) -> tuple[RawClient, str, dict[str, Any]]:
    """A session of the scripted agent on worker :data:`KILLED` running ``prompt``: its
    client, its id and the agent's first request of ``method`` as the client got it, once
    the request is stored."""
    client = await client_on(served, KILLED)
    assert client is not None
    sid = (await client.result("session/new", {"cwd": str(work),
                                               "agentAlias": "scripted"}))["sessionId"]
    await client.send("session/prompt", {"sessionId": sid, "prompt": prompt})
    while True:
        msg = json.loads(await asyncio.wait_for(client.ws.recv(), WAIT))
        if msg.get("method") == method:
            break
    await until(lambda: asyncio.to_thread(logged_permission_requests, served),
                "the request to be logged")
    return client, sid, msg


async def drain(client: RawClient) -> None:
    """Read ``client`` until its connection (to a worker that died) closes."""
    with contextlib.suppress(ConnectionClosed, TimeoutError):
        while True:
            await asyncio.wait_for(client.ws.recv(), WAIT)


async def reattach(served: Served, sid: str, old_pid: int) -> RawClient:
    """Once worker :data:`KILLED` serves again (not as ``old_pid``): a client attached to
    ``sid`` as controller with the whole log after message 0."""
    async def restarted() -> bool:
        with contextlib.suppress(KeyError):
            return (worker_pid(served, KILLED) != old_pid
                    and (await served.health_status())[0] == 200)
        return False
    await until(restarted, f"worker {KILLED} serving again", tries=1200)
    again = RawClient(await dial(served, query=f"worker={KILLED}"))
    await again.result("initialize", {"protocolVersion": 1})
    await again.send("session/attach", {"sessionId": sid, "role": "controller",
                                        "historyPolicy": "after_message",
                                        "afterMessageId": 0})
    return again


async def readopted_turn(served: Served, sid: str) -> dict[str, Any]:
    """The re-adopting worker's ``adopted_turn_running`` log line for ``sid``."""
    def lines() -> list[dict[str, Any]]:
        return [e for e in served.events()
                if e.get("event") == "adopted_turn_running" and e.get("session_id") == sid]
    await eventually(lambda: bool(lines()), WAIT, "the re-adopted turn's log line")
    assert len(lines()) == 1, lines()
    return lines()[0]


async def test_an_elicitation_open_at_the_kill_is_asked_again(tmp_path: Path) -> None:
    """The re-attached client gets the same form under a new id; its answer reaches the
    agent once, under the agent's id, and the turn completes."""
    work = tmp_path / "work"
    work.mkdir()
    agent_log = tmp_path / "agent.log"
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent_section("scripted", str(agent_log))) as served:
        client, sid, first = await ask_on_worker(served, work, "elicit", "elicitation/create")
        before = agent_pids(served)
        old = kill_worker(served, KILLED)
        await drain(client)

        again = await reattach(served, sid, old)
        stream = Stream(sid)
        asked: dict[str, Any] | None = None
        while stream.completed is None:
            msg = json.loads(await asyncio.wait_for(again.ws.recv(), WAIT))
            if msg.get("method") == "elicitation/create":
                assert asked is None, "asked once"
                asked = msg
                await again.ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "action": "accept", "content": {"name": "Ada"}}}))
                continue
            stream.see(msg)
        assert asked is not None
        assert asked["params"] == first["params"], "the same form, for the same session"
        assert asked["params"]["sessionId"] == sid
        assert stream.completed.get("stopReason") == "end_turn"
        texts = "".join(stream.chunks)
        assert '"accept"' in texts and '"Ada"' in texts, texts
        seen = answers_seen(agent_log)
        assert len(seen) == 1 and seen[0].startswith("e"), seen  # one answer, under its id
        assert (await readopted_turn(served, sid)).get("open_questions") == 1
        assert agent_pids(served) == before, "the agent was not replaced"
        await again.ws.close()
        pids = list(before.values())
    await eventually(lambda: not alive(pids), WAIT, "every agent to be gone")


async def test_an_answer_the_agent_got_before_the_kill_is_not_asked_again(
        tmp_path: Path) -> None:
    """The agent kills the worker as its answer arrives, the store stopped meanwhile: the
    answer was stored before the agent got it, so the re-adopted turn has no open question
    and the agent never gets a second answer."""
    work = tmp_path / "work"
    work.mkdir()
    agent_log = tmp_path / "agent.log"
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent_section("scripted", str(agent_log))) as served:
        old = worker_pid(served, KILLED)
        client, sid, asked = await ask_on_worker(served, work, f"ask kill {old}",
                                                 "session/request_permission")
        before = agent_pids(served)
        store = session_service(served)
        store.suspend()
        try:
            await client.ws.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": {
                "outcome": {"outcome": "selected", "optionId": "allow"}}}))
            # An answer written before it is stored reaches the agent now, which kills the
            # worker while the answer is unstored; a stored one waits for the store.
            with contextlib.suppress(AssertionError):
                await until(lambda: asyncio.to_thread(lambda: not alive([old])),
                            "the agent to kill the worker", tries=40)
        finally:
            store.resume()
        await eventually(lambda: not alive([old]), WAIT, "the agent to kill the worker")
        await drain(client)

        again = await reattach(served, sid, old)
        stream = Stream(sid)
        while stream.completed is None:
            msg = json.loads(await asyncio.wait_for(again.ws.recv(), WAIT))
            assert msg.get("method") != "session/request_permission", "asked again"
            stream.see(msg)
        assert stream.completed.get("stopReason") == "end_turn"
        assert '"optionId": "allow"' in "".join(stream.chunks)
        assert (await readopted_turn(served, sid)).get("open_questions") == 0, "none open"
        seen = answers_seen(agent_log)
        assert len(seen) == 1 and seen[0].startswith("p"), seen  # one answer, under its id
        assert agent_pids(served) == before, "the agent was not replaced"
        await again.ws.close()
        pids = list(before.values())
    await eventually(lambda: not alive(pids), WAIT, "every agent to be gone")


async def test_a_v2_client_is_asked_the_elicitation_again(tmp_path: Path) -> None:
    """The same for a v2 client, which resumes by acpgate's event cursor: the form it is
    asked again is the one it was asked (v2 relays it unchanged, its frames valid v2), and
    its answer ends the turn at ``idle``."""
    work = tmp_path / "work"
    work.mkdir()
    agent_log = tmp_path / "agent.log"
    async with serve_workers(tmp_path, workers=2, detach_grace_secs=600,
                             extra=agent_section("scripted", str(agent_log))) as served:
        ws = await v2_client(served)
        sid = (await call(ws, None, True, 1, "session/new", {
            "cwd": str(work), "agentAlias": "scripted"}))["sessionId"]
        seen = Seen(sid)
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                  "params": {"sessionId": sid, "prompt": [
                                      {"type": "text", "text": "elicit"}]}}))
        first = await read(ws, True)  # the form may come before the prompt's answer
        while first.get("method") != "elicitation/create":
            seen.see(first, True)
            first = await read(ws, True)
        await until(lambda: asyncio.to_thread(logged_permission_requests, served),
                    "the request to be logged")
        old = kill_worker(served, KILLED)
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            while True:
                seen.see(await read(ws, True), True)

        async def restarted() -> bool:
            with contextlib.suppress(KeyError):
                return (worker_pid(served, KILLED) != old
                        and (await served.health_status())[0] == 200)
            return False
        await until(restarted, f"worker {KILLED} serving again", tries=1200)
        with on_worker(served, KILLED):
            back = await dial(served, query=f"worker={KILLED}")
            await back.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                        "params": INIT_V2}))
            await read(back, True)
        await back.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/resume",
                                    "params": {"sessionId": sid, "cwd": str(work), "replayFrom": {
                                        "type": "_acpgate_event",
                                        "eventId": seen.last_event + 1}}}))
        asked: dict[str, Any] | None = None
        while seen.end is None:  # the form may come before the resume's answer
            msg = await read(back, True)
            if msg.get("id") == 1 and "method" not in msg:
                assert "result" in msg, msg
                continue
            if msg.get("method") == "elicitation/create":
                assert asked is None, "asked once"
                asked = msg
                await back.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "action": "accept", "content": {"name": "Ada"}}}))
                continue
            seen.see(msg, True)
        assert asked is not None and asked["params"] == first["params"]
        assert seen.end.get("stopReason") == "end_turn", seen.end
        assert '"Ada"' in "".join(seen.chunks)
        assert len(answers_seen(agent_log)) == 1, "the agent got one answer"
        await back.close()
