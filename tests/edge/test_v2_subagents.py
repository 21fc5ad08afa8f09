"""Subagents and background work of a v2 agent (``tests/v2_agent.py``) through ``acpgate acp``.

A v2 client gets each child session the agent announces under an id of acpgate's, and
the child's updates as that session's own; a v1 client on the same agent gets the
child's text as thoughts of the parent marked ``_meta.acpgate.subagent`` and a tool-call
card per child. Children are
stored under their parent (``session/list``) and replayed from the event log. Background
lists reach a v2 client on every ``state_update``; ``tool_call/cancel``,
``terminal/cancel`` and ``session/cancel`` of a child reach the agent under its own ids.
Every message to the v2 client and to the agent is validated against the v2 schema.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fresh_url
from tests.e2e.harness import AcpProcess, child_env, updates, write_config
from tests.v2_agent import agent_section, received
from tests.v2schema import check_sent, check_to_agent

pytestmark = pytest.mark.slow

_V2_INIT = {"protocolVersion": 2, "info": {"name": "c", "version": "1"}}


def _acp(tmp_path: Path, log: Path, mode: str = "v2",
         env: dict[str, str] | None = None) -> AcpProcess:
    cfg = write_config(tmp_path / "cfg", default_agent="two", max_sessions=10,
                       extra=agent_section("two", str(log), mode, '"auto"'))
    return AcpProcess(cfg, env=None if env is None else {**child_env(), **env})


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "agent.log"


@pytest.fixture
def acp(tmp_path: Path, log: Path) -> Iterator[AcpProcess]:
    proc = _acp(tmp_path, log)
    yield proc
    proc.close()
    proc.kill()


def _work(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return str(work)


def _checked_agent_log(log: Path) -> list[dict[str, Any]]:
    got = received(str(log))
    for message in got:
        check_to_agent(message, None if "method" in message else "session/request_permission")
    return got


def _until_idle(acp: AcpProcess, sid: str) -> list[dict[str, Any]]:
    """What arrives until ``sid``'s state_update that ends a turn (has a stop reason)."""
    before, last = acp.read_until(
        lambda m: m.get("method") == "session/update" and m["params"]["sessionId"] == sid
        and m["params"]["update"].get("sessionUpdate") == "state_update"
        and "stopReason" in m["params"]["update"])
    return [*before, last]


def _prompt_v2(acp: AcpProcess, sid: str, text: str) -> list[dict[str, Any]]:
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": text}]})
    assert "messageId" in resp["result"], resp
    return [*before, *_until_idle(acp, sid)]


def _listed(acp: AcpProcess, wanted: set[str]) -> dict[str, dict[str, Any]]:
    """session/list once every id of ``wanted`` is in it (the rows of children are written
    beside the relay)."""
    for _ in range(100):
        got = {s["sessionId"]: s for s in acp.result("session/list", {})["sessions"]}
        if wanted <= set(got):
            return got
        time.sleep(0.05)
    raise AssertionError(f"not listed: {wanted - set(got)}")


def _subagent_updates(seen: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(m["params"]["sessionId"], m["params"]["update"]) for m in seen
            if m.get("method") == "session/update"
            and m["params"]["update"].get("sessionUpdate") == "subagent_update"]


def test_v2_client_gets_child_sessions(acp: AcpProcess, log: Path, tmp_path: Path) -> None:
    acp.check = check_sent
    acp.result("initialize", _V2_INIT)
    sid = acp.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
    seen = _prompt_v2(acp, sid, "sub task")
    announced = _subagent_updates(seen)
    (on, first), *_ = announced
    child = first["sessionId"]
    assert on == sid and child not in (sid,) and not child.startswith("child-")
    assert first["title"] == "Helper" and first["capabilities"] == {"cancel": {}}
    # The grandchild is announced on the child's session, under an id of acpgate's too.
    grand = next(u["sessionId"] for s, u in announced if s == child)
    assert grand not in (sid, child) and "grand" not in grand
    # The child's own updates come as its session's, as the agent sent them.
    child_kinds = [u["sessionUpdate"] for u in updates(seen, child)]
    assert child_kinds == ["user_message_chunk", "tool_call_update", "agent_message_chunk",
                           "subagent_update"], child_kinds
    assert updates(seen, child)[2]["content"]["text"] == "child: sub task"
    message = next(u for u in updates(seen, sid) if u["sessionUpdate"] == "session_message")
    assert message["senderSessionId"] == sid and message["recipientSessionId"] == child
    # The parent's own answer is not mixed with the child's.
    texts = [u["content"]["text"] for u in updates(seen, sid)
             if u["sessionUpdate"] == "agent_message_chunk"]
    assert texts == ["parent: sub task"]
    # No id of the agent's reaches the client, nor the cards made for v1 clients.
    assert "child-" not in json.dumps(seen) and "acpgate-subagent-" not in json.dumps(seen)
    # Stored under their parent: listed with their lineage and the child's title.
    listed = _listed(acp, {child, grand})
    assert listed[child]["_meta"]["acpgate"]["parentSessionId"] == sid
    assert listed[child]["_meta"]["acpgate"]["subagent"] is True
    assert "subagent" not in listed[sid]["_meta"]["acpgate"]
    assert listed[child]["title"] == "Helper"
    assert listed[grand]["_meta"]["acpgate"]["parentSessionId"] == child
    # A child is no session to resume: its updates come with its parent's.
    refused = acp.error("session/resume", {"sessionId": child, "cwd": _work(tmp_path),
                                           "mcpServers": []})
    assert refused["code"] == -32602 and sid in refused["message"], refused
    assert refused["data"]["parentSessionId"] == sid
    acp.result("session/close", {"sessionId": sid})
    # Its parent gone, it is still no session to resume on its own: its parent is named.
    refused = acp.error("session/resume", {"sessionId": child, "cwd": _work(tmp_path),
                                           "mcpServers": [], "replayFrom": {"type": "start"}})
    assert refused["code"] == -32602 and sid in refused["message"], refused
    assert refused["data"]["parentSessionId"] == sid
    # Replayed from the event log: the child's updates come back as the child's.
    before, resp = acp.call("session/resume", {
        "sessionId": sid, "cwd": _work(tmp_path), "mcpServers": [],
        "replayFrom": {"type": "_acpgate_event", "eventId": 1}})
    assert "result" in resp, resp
    replayed = updates(before, child)
    assert [u["sessionUpdate"] for u in replayed] == child_kinds
    assert _subagent_updates(before)[0][1]["sessionId"] == child
    _checked_agent_log(log)


def test_v1_client_gets_child_text_as_marked_thoughts(acp: AcpProcess, log: Path,
                                                      tmp_path: Path) -> None:
    acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = acp.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "sub task"}]})
    assert resp["result"]["stopReason"] == "end_turn"
    # Everything is the parent session's: a v1 client knows no other.
    assert {m["params"]["sessionId"] for m in before
            if m.get("method") == "session/update"} == {sid}
    seen = updates(before, sid)
    child = next(u["sessionId"] for u in seen if u["sessionUpdate"] == "subagent_update")
    thoughts = [u for u in seen if u["sessionUpdate"] == "agent_thought_chunk"
                and "subagent" in u.get("_meta", {}).get("acpgate", {})]
    assert [(t["content"]["text"], t["_meta"]["acpgate"]["subagent"]) for t in thoughts] == [
        ("look up sub task", {"sessionId": child, "sessionUpdate": "user_message_chunk"}),
        ("child: sub task", {"sessionId": child, "sessionUpdate": "agent_message_chunk"})]
    # The answer is the parent's alone; the child's tool call is acpgate's own kind.
    assert [u["content"]["text"] for u in seen
            if u["sessionUpdate"] == "agent_message_chunk"] == ["parent: sub task"]
    carried = [u for u in seen if u["sessionUpdate"] == "subagent_session_update"]
    assert carried and carried[0]["sessionId"] == child
    assert carried[0]["update"]["toolCallId"] == "ct1"
    assert "child-" not in json.dumps(before)
    # Each child is a tool-call card too: titled, in progress, completed with its answer.
    card = f"acpgate-subagent-{child}"
    cards = [u for u in seen if u.get("toolCallId", "").startswith("acpgate-subagent-")]
    mine = [u for u in cards if u["toolCallId"] == card]
    assert [(u["sessionUpdate"], u.get("title"), u.get("kind"), u.get("status"))
            for u in mine] == [("tool_call", "Helper", "think", "in_progress"),
                               ("tool_call_update", None, None, "completed")]
    assert mine[1]["content"] == [{"type": "content", "content": {
        "type": "text", "text": "child: sub task"}}]
    grand = [u for u in cards if u["toolCallId"] != card]
    assert [(u["title"], u["status"]) for u in grand] == [("Grandchild", "in_progress")]
    # The child's row is no session to load, whether or not its parent runs: a fresh
    # adapter would give an empty session of the same agent. Its parent is named.
    assert _listed(acp, {child})[child]["_meta"]["acpgate"]["subagent"] is True
    for method in ("session/load", "session/resume"):
        refused = acp.error(method, {"sessionId": child, "cwd": _work(tmp_path),
                                     "mcpServers": []})
        assert refused["code"] == -32602 and sid in refused["message"], refused
        assert refused["data"] == {"parentSessionId": sid}
    acp.result("session/close", {"sessionId": sid})
    refused = acp.error("session/load", {"sessionId": child, "cwd": _work(tmp_path),
                                         "mcpServers": []})
    assert refused["data"] == {"parentSessionId": sid}, refused
    # Nor is it a session to fork (the fork would be just as empty).
    refused = acp.error("session/fork", {"sessionId": child, "cwd": _work(tmp_path),
                                         "mcpServers": []})
    assert refused["code"] == -32602 and "fork " + sid in refused["message"], refused
    assert refused["data"] == {"parentSessionId": sid}, refused


def test_v2_background_work_and_its_cancels(acp: AcpProcess, log: Path,
                                            tmp_path: Path) -> None:
    acp.check = check_sent
    acp.result("initialize", _V2_INIT)
    sid = acp.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
    seen = updates(_prompt_v2(acp, sid, "bg"), sid)
    states = [u for u in seen if u["sessionUpdate"] == "state_update"]
    listed = [{"type": "tool_call", "toolCallId": "t-bg"}]
    # From the agent's first report on, every state update carries the list.
    assert states[-1]["state"] == "idle" and states[-1]["background"] == listed
    assert any(s.get("background") == listed for s in states[:-1])
    # tool_call/cancel reaches the agent; it confirms with the call's final status and
    # an empty list. An unknown call is the agent's -32602.
    assert acp.error("tool_call/cancel", {"sessionId": sid, "toolCallId": "nope"})[
        "code"] == -32602
    before, resp = acp.call("tool_call/cancel", {"sessionId": sid, "toolCallId": "t-bg"})
    assert resp["result"] == {}, resp
    def emptied(m: dict[str, Any]) -> bool:
        return m.get("method") == "session/update" \
            and m["params"]["update"].get("background") == []
    after = before if any(map(emptied, before)) else [*before, *acp.read_until(emptied)[0]]
    assert any(u.get("status") == "cancelled" for u in updates(after, sid)
               if u["sessionUpdate"] == "tool_call_update")
    # terminal/cancel alike.
    seen = updates(_prompt_v2(acp, sid, "term"), sid)
    assert seen[-1]["background"] == [{"type": "terminal", "terminalId": "term-1"}]
    assert acp.result("terminal/cancel", {"sessionId": sid, "terminalId": "term-1"}) == {}
    # session/cancel of a running child goes to the agent under its id of the child.
    seen = _prompt_v2(acp, sid, "subrun")
    child = _subagent_updates(seen)[0][1]["sessionId"]
    acp.notify("session/cancel", {"sessionId": child})
    _, idle = acp.read_until(
        lambda m: m.get("method") == "session/update"
        and m["params"]["update"].get("sessionUpdate") == "subagent_update"
        and (m["params"]["update"].get("state") or {}).get("stopReason") == "cancelled")
    assert idle["params"]["update"]["sessionId"] == child
    # Another connection's session, or an unknown child, is not found.
    assert acp.error("tool_call/cancel", {"sessionId": "nope", "toolCallId": "t"})[
        "code"] == -32002
    sent = _checked_agent_log(log)
    cancels = [m["params"] for m in sent if m.get("method") == "session/cancel"]
    assert cancels and cancels[-1]["sessionId"].startswith("child-")
    assert [m["params"]["terminalId"] for m in sent
            if m.get("method") == "terminal/cancel"] == ["term-1"]


def test_cancels_on_a_v1_agent_are_refused(tmp_path: Path, log: Path) -> None:
    proc = _acp(tmp_path, log, "refuse2")
    try:
        proc.check = check_sent
        proc.result("initialize", _V2_INIT)
        sid = proc.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
        for method, key in (("tool_call/cancel", "toolCallId"),
                            ("terminal/cancel", "terminalId")):
            error = proc.error(method, {"sessionId": sid, key: "x"})
            assert error["code"] == -32601 and "ACP v1" in error["message"], error
        assert not [m for m in received(str(log)) if m.get("method") in (
            "tool_call/cancel", "terminal/cancel")]
    finally:
        proc.close()
        proc.kill()


def _card_updates(seen: list[dict[str, Any]], sid: str, card: str) -> list[dict[str, Any]]:
    return [u for u in updates(seen, sid) if u.get("toolCallId") == card]


@pytest.fixture(params=["sqlite", "postgres"])
def either_store(request: pytest.FixtureRequest, tmp_path: Path,
                 log: Path) -> Iterator[AcpProcess]:
    """``acpgate acp`` on the v2 test agent, its sessions in SQLite or in PostgreSQL."""
    env = None
    if request.param == "postgres":
        cluster = request.getfixturevalue("pg_cluster")
        env = {"ACPGATE_store__url": asyncio.run(fresh_url(cluster))}
    proc = _acp(tmp_path, log, env=env)
    yield proc
    proc.close()
    proc.kill()


def test_a_child_ending_after_its_turn_is_in_the_stored_history(either_store: AcpProcess,
                                                                tmp_path: Path) -> None:
    """The agent answers the prompt while its child runs on; the child ends later (before the
    answer to a mode change, no turn running): its card's end and last text reach the v1
    client, and the parent's stored history has them — a fork of the parent (which copies
    the history, not the log) replays the card completed with the child's answer — while a
    load of the parent itself replays it once. On both stores."""
    acp = either_store
    work = _work(tmp_path)
    acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = acp.result("session/new", {"cwd": work})["sessionId"]
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "sublate task"}]})
    assert resp["result"]["stopReason"] == "end_turn"
    child = next(u["sessionId"] for u in updates(before, sid)
                 if u["sessionUpdate"] == "subagent_update")
    card = f"acpgate-subagent-{child}"
    assert [u.get("status") for u in _card_updates(before, sid, card)] == ["in_progress"]
    # The child ends now, between turns.
    late, _ = acp.call("session/set_mode", {"sessionId": sid, "modeId": "code"})
    ended = _card_updates(late, sid, card)
    assert [u.get("status") for u in ended] == ["completed"], late
    answer = "child: sublate taskdone: sublate task"
    assert ended[0]["content"] == [{"type": "content", "content": {
        "type": "text", "text": answer}}]
    # The fork replays the parent's stored history: the card, then its end with the answer.
    fork = acp.result("session/fork", {"sessionId": sid, "cwd": work,
                                       "mcpServers": []})["sessionId"]
    acp.result("session/close", {"sessionId": fork})
    replayed, resp = acp.call("session/load", {"sessionId": fork, "cwd": work,
                                               "mcpServers": []})
    assert "result" in resp, resp
    cards = _card_updates(replayed, fork, card)
    assert [(u["sessionUpdate"], u.get("title")) for u in cards] == [
        ("tool_call", "Helper"), ("tool_call_update", "Helper")], cards
    assert cards[1]["status"] == "completed" and cards[1]["rawOutput"] == answer
    # The parent's own load replays its log: the card's end once, not again from the store.
    acp.result("session/close", {"sessionId": fork})
    acp.result("session/close", {"sessionId": sid})
    replayed, resp = acp.call("session/load", {"sessionId": sid, "cwd": work,
                                               "mcpServers": []})
    assert "result" in resp, resp
    assert [u.get("status") for u in _card_updates(replayed, sid, card)] == [
        "in_progress", "completed"]
