"""Faults mid-turn on a real ``acpgate serve``: ``session/load`` replays what the client had.

Each test streams turns of an external agent (one chunk per 0.1 s) to WebSocket clients,
records the event ids each client received, causes one fault — ``kill -9`` of serve and
everything it started, ``kill -9`` of the turn's adapter, ``SIGTERM`` of serve while the
session is detached mid-turn, ``kill -9`` of the lifecycle service — then loads each
session (after a restart where the fault needs one) and compares: every event the
client had is replayed once, in order, but at most the newest few of one commit window
(the log commits every 50 ms), and the cut turn's prompt carries the stop reason the
fault gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.chaos.lifecycle_kill import agents, kill_lifecycle
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import WAIT, Gateway, Token, running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ALIAS = "scripted"
#: Chunks each client reads before the fault (the turn streams many more).
SEEN = 12
STREAM = 600
HTTP_UNAVAILABLE = 503
#: The lifecycle service's death fails no turn: each streams this many to its end.
LIFECYCLE_STREAM = 40
#: The newest events that may be missing after a kill: one commit window, with room for a
#: slow machine's writer (the agent streams one chunk per 0.1 s).
WINDOW_EVENTS = 3


@dataclass
class Streaming:
    """One client's session and what it received of the running turn."""

    client: RawClient
    session_id: str
    prompt_id: int
    had: list[int] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)


def _extra() -> str:
    return agent_section(ALIAS)


async def _stream(gw: Gateway, token: Token, count: int, chunks: int = STREAM,
                  workers: int = 0) -> list[Streaming]:
    """``count`` clients, each with a session streaming ``chunks``; returns once each got
    :data:`SEEN`. With ``workers``, client ``i`` is served by edge worker ``i % workers + 1``
    (``?worker=k``)."""
    out = []
    for i in range(count):
        ws = (await _dial(f"{gw.url}?worker={i % workers + 1}", token) if workers
              else await gw.connect(token))
        client = RawClient(ws)
        sid = (await client.result("session/new", {"agentAlias": ALIAS}))["sessionId"]
        await client.result("session/prompt", {"sessionId": sid, "prompt": "a completed turn"})
        req = await client.send("session/prompt", {"sessionId": sid, "prompt": f"stream {chunks}"})
        out.append(Streaming(client, sid, req))
    await asyncio.gather(*(_read(s, SEEN) for s in out))
    return out


async def _read(s: Streaming, count: int) -> None:
    while len(s.had) < count:
        _note(s, json.loads(await asyncio.wait_for(s.client.ws.recv(), WAIT)))


def _note(s: Streaming, msg: dict[str, Any]) -> None:
    """Keep ``msg`` in what ``s``'s client had, when it is one of its session's chunks."""
    if msg.get("method") == "session/update" and msg["params"]["sessionId"] == s.session_id:
        update = msg["params"]["update"]
        if update.get("sessionUpdate") == "agent_message_chunk":
            s.had.append(int(update["_meta"]["acpgate"]["eventId"]))
            s.chunks.append(update["content"]["text"])


def _found(value: Any, key: str) -> Any:
    """The first ``key`` anywhere in ``value`` (nested objects), or None."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            if (hit := _found(item, key)) is not None:
                return hit
    return None


async def _dial(url: str, token: Token) -> ClientConnection:
    """A client of ``url``, once a worker that was restarted serves again (503 until then)."""
    headers = {"Authorization": f"Bearer {token.secret}"}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        try:
            return await connect(url, proxy=None, additional_headers=headers)
        except InvalidStatus as exc:
            if exc.response.status_code != HTTP_UNAVAILABLE or loop.time() > deadline:
                raise
        await asyncio.sleep(0.2)


async def _load(gw: Gateway, token: Token, sid: str) -> list[dict[str, Any]]:
    """The updates a fresh client's ``session/load`` of ``sid`` replays (on the worker the
    gateway names, when the session's claim is another worker's)."""
    query = ""
    for _ in range(2):
        client = RawClient(await _dial(gw.url + query, token))
        try:
            replay, resp = await client.call("session/load", {"sessionId": sid})
        finally:
            await client.ws.close()
        if "result" in resp:
            return [m["params"]["update"] for m in replay if m.get("method") == "session/update"
                    and m["params"]["sessionId"] == sid]
        query = f"?{_found(resp, 'query')}"
        assert not query.endswith("None"), resp
    raise AssertionError(f"session/load of {sid} never answered on its worker")


def _check(s: Streaming, replay: list[dict[str, Any]], stop: set[str | None], window: int,
           chunks: int = STREAM) -> None:
    """``replay`` holds what ``s`` had (all but at most ``window`` newest), each once, in
    order; its cut turn's prompt is marked with one of ``stop``."""
    ids = [int(u["_meta"]["acpgate"]["eventId"]) for u in replay]
    assert len(ids) == len(set(ids)), "no event replayed twice"
    assert ids == sorted(ids)
    prompts = [u for u in replay if u["sessionUpdate"] == "user_message_chunk"]
    assert [u["content"]["text"] for u in prompts] == ["a completed turn", f"stream {chunks}"]
    assert "stopReason" not in prompts[0]["_meta"]["acpgate"]
    assert prompts[1]["_meta"]["acpgate"].get("stopReason") in stop, prompts[1]
    got = set(ids)
    missing = [i for i in s.had if i not in got]
    kept = len(s.had) - len(missing)
    assert s.had[:kept] == [i for i in ids if i in set(s.had)], \
        "what is missing is the newest events only, never one in between"
    assert len(missing) <= window, (len(missing), len(s.had))


def _kill_tree(gw: Gateway) -> None:
    """``kill -9`` of serve and of every process it started (a host's crash)."""
    procs = [psutil.Process(gw.proc.pid)]
    with contextlib.suppress(psutil.Error):
        procs += procs[0].children(recursive=True)
    procs += [psutil.Process(pid) for pid in agents(gw).values()]
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


async def test_kill9_of_serve_and_everything_it_started(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=_extra()) as gw:
        token = await gw.token("chaos")
        streams = await _stream(gw, token, 3)
        _kill_tree(gw)
        await gw.proc.wait()
    async with running_gateway(tmp_path, extra=_extra()) as gw:
        for s in streams:
            _check(s, await _load(gw, token, s.session_id), {"interrupted"}, WINDOW_EVENTS)


async def test_kill9_of_the_adapter_mid_turn(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=_extra()) as gw:
        token = await gw.token("chaos")
        (s,) = await _stream(gw, token, 1)
        (pid,) = agents(gw).values()
        os.kill(pid, signal.SIGKILL)
        _, resp = await s.client.until_response(s.prompt_id)
        assert "error" in resp, resp
        with contextlib.suppress(Exception):
            await s.client.ws.close()
        # The turn ended here: everything the client had is stored, none missing.
        _check(s, await _load(gw, token, s.session_id), {"failed", "interrupted"}, 0)


async def test_sigterm_of_serve_with_the_session_detached_mid_turn(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=_extra()) as gw:
        token = await gw.token("chaos")
        (s,) = await _stream(gw, token, 1)
        await s.client.ws.close()  # detached; its turn streams on
        await asyncio.sleep(0.5)
    # serve stopped (SIGTERM) with the session detached: it stored all it had.
    async with running_gateway(tmp_path, extra=_extra()) as gw:
        replay = await _load(gw, token, s.session_id)
        _check(s, replay, {"interrupted", "failed", "cancelled"}, 0)
        chunks = [u for u in replay if u["sessionUpdate"] == "agent_message_chunk"]
        assert len(chunks) > 1 + len(s.had), "what streamed while detached is replayed too"


async def test_kill9_of_the_lifecycle_service_then_load(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=_extra()) as gw:
        token = await gw.token("chaos")
        streams = await _stream(gw, token, 4, LIFECYCLE_STREAM)
        await kill_lifecycle(gw)
        for s in streams:
            await _read(s, LIFECYCLE_STREAM)
            _, resp = await s.client.until_response(s.prompt_id)
            assert resp.get("result", {}).get("stopReason") == "end_turn", resp
            await s.client.ws.close()
        for s in streams:
            # The turns went on: each is stored whole, completed.
            _check(s, await _load(gw, token, s.session_id), {None}, 0, LIFECYCLE_STREAM)


def _edge_workers(gw: Gateway) -> dict[int, int]:
    """Each edge worker's number → its PID."""
    out = {}
    for child in psutil.Process(gw.proc.pid).children():
        with contextlib.suppress(psutil.Error):
            line = child.cmdline()
            if "edge" in line and "--worker" in line:
                out[int(line[line.index("--worker") + 1])] = child.pid
    return out


async def test_kill9_of_one_edge_worker_with_sessions_streaming(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=_extra(), gateway="workers = 2\n") as gw:
        token = await gw.token("chaos")
        streams = await _stream(gw, token, 6, workers=2)
        workers = _edge_workers(gw)
        assert sorted(workers) == [1, 2]
        os.kill(workers[1], signal.SIGKILL)
        cut = [s for s, gone in zip(streams, await asyncio.gather(
            *(_cut_or_alive(s) for s in streams)), strict=True) if gone]
        # Exactly worker 1's clients (the even ones) went with it; worker 2's stream on.
        assert cut == streams[::2]
        # The restarted worker re-adopts its sessions: the cut turn goes on (no mark), and
        # the load (which attaches the detached session) replays what the client had.
        for s in cut:
            _check(s, await _load(gw, token, s.session_id), {None}, WINDOW_EVENTS)


async def _cut_or_alive(s: Streaming) -> bool:
    """True when ``s``'s connection went with the killed worker; False when its worker
    lives. Decided by a request only a live worker answers: frames the client had not read
    yet when the worker died still arrive before the close, so counting further chunks
    would take a cut connection for a live one."""
    try:
        probe = await s.client.send("session/list", {})
        while True:
            msg = json.loads(await asyncio.wait_for(s.client.ws.recv(), WAIT))
            if "method" not in msg and msg.get("id") == probe:
                return False
            _note(s, msg)
    except Exception:
        return True
