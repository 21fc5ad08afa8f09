"""An external adapter written with the official ACP SDK as a `kind = "acp"` backend.

Prompt, permission relay, cancel and all three restore paths (the adapter's own
session/resume, its session/load with its replay suppressed, and a fresh
session seeded with the prior conversation as an embedded resource). The
adapter's results reach the client whole: no dialect fields.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import AcpProcess, message_texts, streamed_text, updates, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def acp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AcpProcess]:
    proc = AcpProcess(write_config(tmp_path_factory.mktemp("sdk") / "cfg", max_sessions=10))
    yield proc
    assert proc.close() == 0
    proc.kill()


def test_prompt_streams_with_rewritten_ids(acp: AcpProcess) -> None:
    sid = acp.new_session(agentAlias="sdk")
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "hello sdk"})
    ups = updates(before)
    assert [u["content"]["text"] for u in ups] == ["echo: ", "hello sdk"]
    assert all(m["params"]["sessionId"] == sid for m in before), "adapter ids never leak"
    assert resp["result"] == {"stopReason": "end_turn"}  # the agent's own, whole
    acp.result("session/close", {"sessionId": sid})


def test_permission_relay(acp: AcpProcess) -> None:
    sid = acp.new_session(agentAlias="sdk")
    acp.handlers["session/request_permission"] = \
        lambda p: {"outcome": {"outcome": "selected", "optionId": "yes"}}
    try:
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "perm"})
    finally:
        acp.handlers.clear()
    req = next(m for m in before if m.get("method") == "session/request_permission")
    assert re.match(r"^zc-out-\d+$", req["id"])
    assert req["params"]["sessionId"] == sid
    assert [o["optionId"] for o in req["params"]["options"]] == ["yes", "no"]
    assert streamed_text(before) == "permission: yes"
    # no answer at all but a cancel: the adapter gets "cancelled" and ends its turn as it
    # chooses (this one: end_turn, as a direct client would see it)
    acp.handlers["session/request_permission"] = lambda p: None
    try:
        rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "perm"})
        acp.read_until(lambda m: m.get("method") == "session/request_permission")
        acp.notify("session/cancel", {"sessionId": sid})
        before, resp = acp.response(rid)
    finally:
        acp.handlers.clear()
    assert resp["result"] == {"stopReason": "end_turn"}
    assert streamed_text(before) == "permission: cancelled"
    acp.result("session/close", {"sessionId": sid})


def test_cancel(acp: AcpProcess) -> None:
    sid = acp.new_session(agentAlias="sdk")
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "slow"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    acp.notify("session/cancel", {"session_id": sid})
    before, resp = acp.response(rid)
    assert resp["result"] == {"stopReason": "cancelled"}
    # The cancelled turn is stored with what was streamed: the load replays it.
    streamed = "s0 " + streamed_text(before)
    acp.result("session/close", {"sessionId": sid})
    replay, _ = acp.call("session/load", {"sessionId": sid})
    ups = updates(replay, sid)
    assert ups[0]["content"]["text"] == "slow"
    assert ups[0]["_meta"] == {"acpgate": {"stopReason": "cancelled"}}
    assert [u["content"]["text"] for u in ups[1:]] == [streamed]
    acp.result("session/close", {"sessionId": sid})


@pytest.mark.parametrize(
    ("alias", "expect"),
    [("sdk", "remembered 1 [first message] no-embedded"),
     ("sdkload", "remembered 1 [first message] no-embedded"),
     ("sdknone", "remembered 0 [] text:prior-ok"),
     ("sdkcaps", "remembered 0 [] embedded:prior-ok")],
    ids=["own-resume", "own-load", "text-history", "embedded-history"],
)
def test_restore(acp: AcpProcess, alias: str, expect: str, tmp_path: Path) -> None:
    sid = acp.new_session(agentAlias=alias, cwd=str(tmp_path))
    live, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "first message"})
    assert resp["result"] == {"stopReason": "end_turn"}
    acp.result("session/close", {"sessionId": sid})
    replay, resp = acp.call("session/load", {"sessionId": sid, "cwd": "/"})
    assert set(resp["result"]) == {"modes", "configOptions"}  # the agent's own
    # only the edge's replay from the store (the adapter's own replay is suppressed): the
    # prompt, then each update exactly as the client got it live, event ids and all
    prompt, *rest = replay
    assert updates([prompt]) == [{"sessionUpdate": "user_message_chunk",
                                  "content": {"type": "text", "text": "first message"}}]
    assert rest == live
    assert message_texts(updates(replay)) == [
        ("user_message_chunk", "first message"), ("agent_message_chunk", "echo: first message")]
    assert acp.say(sid, "recall") == expect
    # the embedded prior conversation is sent once, not with every prompt
    if alias in ("sdknone", "sdkcaps"):
        assert acp.say(sid, "recall") == "remembered 0 [] no-embedded"
        # the restored adapter session got the stored workspace, not the client's cwd (§8)
        setup = acp.say(sid, "setup")
        assert setup.startswith(f"cwd={os.path.realpath(tmp_path)} ")
    acp.result("session/close", {"sessionId": sid})


def test_policy_refused_read_and_failed_turn(acp: AcpProcess) -> None:
    """A read outside the session's roots is refused (-32003); an adapter error fails the turn."""
    sid = acp.new_session(agentAlias="sdk")
    assert acp.say(sid, "fsread") == "fs error -32003"
    err = acp.error("session/prompt", {"sessionId": sid, "prompt": "fail"})
    # the agent's error exactly; what acpgate was doing beside it
    assert err == {"code": -32603, "message": "sdk agent failed on purpose",
                   "data": {"acpgate": {"during": "session/prompt", "agent": "sdk"}}}
    # the session keeps working; the replay (the event log) shows the failed turn's prompt
    # as the client sent it, marked failed, and nothing the agent did not stream
    assert acp.say(sid, "still here") == "echo: still here"
    acp.result("session/close", {"sessionId": sid})
    replay, _ = acp.call("session/load", {"sessionId": sid})
    prompts = [u for u in updates(replay) if u["sessionUpdate"] == "user_message_chunk"]
    assert [u["content"]["text"] for u in prompts] == ["fsread", "fail", "still here"]
    assert [u.get("_meta") for u in prompts] == [
        None, {"acpgate": {"stopReason": "failed"}}, None]
    assert message_texts(updates(replay)) == [
        ("user_message_chunk", "fsread"), ("agent_message_chunk", "fs error -32003"),
        ("user_message_chunk", "fail"),
        ("user_message_chunk", "still here"), ("agent_message_chunk", "echo: still here")]
    acp.result("session/close", {"sessionId": sid})


def test_session_new_toward_the_adapter(acp: AcpProcess, tmp_path: Path) -> None:
    """The adapter's session/new carries the session workspace and the client's mcpServers,
    but not acpgate's own ``_meta.acpgate`` (that is for the built-in agent only); its
    initialize promised fs (served by the edge) and no terminal (the client has none)."""
    mcp = [{"name": "tools-a", "command": "/bin/true", "args": [], "env": []}]
    sid = acp.new_session(agentAlias="sdk", cwd=str(tmp_path), mcpServers=mcp)
    content = acp.say(sid, "setup")
    assert content == (f"cwd={os.path.realpath(tmp_path)} mcp=tools-a acpgate-meta=False "
                       "fs=True,True terminal=False")
    acp.result("session/close", {"sessionId": sid})


def test_restore_falls_back_when_the_adapter_forgot(acp: AcpProcess) -> None:
    """An adapter that refuses its own resume gets a fresh session seeded with the transcript."""
    sid = acp.new_session(agentAlias="sdk")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "first message"})
    acp.result("session/close", {"sessionId": sid})
    state = acp.config_dir / "sdk-state.json"
    state.write_text("{}")  # the adapter lost every session it had
    assert set(acp.result("session/resume", {"sessionId": sid})) == {"modes", "configOptions"}
    assert acp.say(sid, "recall") == "remembered 0 [] text:prior-ok"
    acp.result("session/close", {"sessionId": sid})


def test_load_that_replays_nothing_falls_back(acp: AcpProcess) -> None:
    """An adapter whose own session/load answers but replays nothing of a stored conversation
    has lost it (gemini-cli 0.61 at times): acpgate carries the conversation over instead."""
    state = acp.config_dir / "sdk-state.json"
    known = set(json.loads(state.read_text())) if state.exists() else set()
    sid = acp.new_session(agentAlias="sdkload")
    acp.result("session/prompt", {"sessionId": sid, "prompt": "first message"})
    acp.result("session/close", {"sessionId": sid})
    sessions = json.loads(state.read_text())
    (own,) = set(sessions) - known
    sessions[own] = []  # the adapter still knows the session, but not what was said
    state.write_text(json.dumps(sessions))
    replay, resp = acp.call("session/load", {"sessionId": sid})
    assert "result" in resp, resp
    assert message_texts(updates(replay)) == [
        ("user_message_chunk", "first message"), ("agent_message_chunk", "echo: first message")]
    assert acp.say(sid, "recall") == "remembered 0 [] text:prior-ok"
    acp.result("session/close", {"sessionId": sid})


def test_cancel_with_nothing_streamed_is_the_agents_answer(acp: AcpProcess) -> None:
    """An external agent's cancelled turn answers as the agent did; SPEC §7's marker and
    ``content`` are the built-in agent's dialect."""
    sid = acp.new_session(agentAlias="sdk")
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "hang"})
    acp.read_until(lambda m: m.get("method") == "session/update")
    assert acp.result("session/cancel", {"sessionId": sid}) == {}
    before, resp = acp.response(rid)
    assert resp["result"] == {"stopReason": "cancelled"}
    assert updates(before) == []
    acp.result("session/close", {"sessionId": sid})
