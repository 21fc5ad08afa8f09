"""v1 and v2 clients through ``acpgate acp`` (stdio) on a v2 agent (``tests/v2_agent.py``).

Every message acpgate sent the agent is checked against the vendored v2 schema
(:func:`tests.v2schema.check_to_agent`); what a v1 client gets is checked for what v1 says
(the prompt answered when the turn ends, ``tool_call`` before its updates, ``plan``,
``modes``); a v2 client's messages against the v2 schema (:func:`tests.v2schema.check_sent`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, updates, write_config
from tests.v2_agent import agent_section, received
from tests.v2schema import check_sent, check_to_agent

pytestmark = pytest.mark.slow


def _acp(tmp_path: Path, log: Path, mode: str = "v2", protocol: str = '"auto"') -> AcpProcess:
    cfg = write_config(tmp_path / "cfg", default_agent="two", max_sessions=10,
                       extra=agent_section("two", str(log), mode, protocol))
    return AcpProcess(cfg)


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


def _sent_to_agent(log: Path) -> list[dict[str, Any]]:
    """What acpgate sent the agent, each message checked against the v2 schema (a response
    by the agent request it answers)."""
    got = received(str(log))
    for message in got:
        # The test agent's only request to the client is a permission request.
        check_to_agent(message, None if "method" in message else "session/request_permission")
    return got


def _texts(seen: list[dict[str, Any]]) -> list[str]:
    """The texts of the message chunks among ``seen``."""
    return [u["content"].get("text", "") for u in seen
            if u["sessionUpdate"] == "agent_message_chunk" and isinstance(u.get("content"), dict)]


def _kinds(messages: list[dict[str, Any]], sid: str) -> list[str]:
    return [u["sessionUpdate"] for u in updates(messages, sid)]


def test_v1_client_on_a_v2_agent(acp: AcpProcess, log: Path, tmp_path: Path) -> None:
    init = acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert init["protocolVersion"] == 1
    new = acp.result("session/new", {"cwd": _work(tmp_path), "mcpServers": [
        {"name": "m", "command": "/bin/true", "args": [], "env": []}]})
    sid = new["sessionId"]
    # The agent's mode config option is v1's modes too (and a v1 config option).
    assert new["modes"]["currentModeId"] == "ask"
    assert [m["id"] for m in new["modes"]["availableModes"]] == ["ask", "code"]
    assert new["configOptions"][0]["id"] == "mode"
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "hello"}]})
    # Answered when the agent went idle, with its stop reason and usage.
    assert resp["result"]["stopReason"] == "end_turn"
    assert resp["result"]["usage"]["totalTokens"] == 5
    seen = updates(before, sid)
    kinds = [u["sessionUpdate"] for u in seen]
    assert "state_update" not in kinds and "user_message_chunk" not in kinds
    assert kinds.index("tool_call") < kinds.index("tool_call_update")
    call = next(u for u in seen if u["sessionUpdate"] == "tool_call")
    assert call["toolCallId"] == "t1" and call["title"] == "Read file"
    folded = [u for u in seen if u["sessionUpdate"] == "tool_call_update"]
    assert folded[0]["content"] == [{"type": "content",
                                     "content": {"type": "text", "text": "line 1"}}]
    plan = next(u for u in seen if u["sessionUpdate"] == "plan")
    assert plan["entries"][0]["content"] == "Answer"
    notice = next(u for u in seen if u["sessionUpdate"] == "agent_thought_chunk")
    assert notice["content"]["text"] == "Heads up\n\na notice"
    assert notice["_meta"]["acpgate"]["notice"]["severity"] == "info"
    assert "echo: hello" in _texts(seen)
    # A failed turn is the prompt's error.
    _, failed = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "fail"}]})
    assert failed["error"]["code"] == -32099
    assert failed["error"]["message"] == "model exploded"
    # The agent's change of its mode option is also v1's current_mode_update; set_mode
    # sets the option.
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "mode"}]})
    assert _kinds(before, sid) == ["config_option_update", "current_mode_update"]
    assert acp.result("session/set_mode", {"sessionId": sid, "modeId": "ask"}) == {}
    got = _sent_to_agent(log)
    first = got[0]
    assert first["method"] == "initialize" and first["params"]["protocolVersion"] == 2
    new_sent = next(m for m in got if m.get("method") == "session/new")
    assert new_sent["params"]["mcpServers"][0]["type"] == "stdio"
    assert any(m.get("method") == "session/set_config_option"
               and m["params"]["value"] == "ask" for m in got)


def test_v1_client_permission_cancel_and_agent_work(acp: AcpProcess, log: Path,
                                                    tmp_path: Path) -> None:
    acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = acp.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "ask"}]})
    _, ask = acp.read_until(lambda m: m.get("method") == "session/request_permission")
    # v2's title and subject are v1's toolCall.
    assert ask["params"]["toolCall"]["toolCallId"] == "t-ask"
    assert ask["params"]["toolCall"]["title"] == "Write a file"
    acp.send({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "outcome": {"outcome": "selected", "optionId": "ok"}}})
    before, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "end_turn"
    assert "requires_action" not in str(before)
    # session/cancel ends a v2 turn: idle "cancelled" is the v1 answer.
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "slow"}]})
    acp.read_until(lambda m: m.get("method") == "session/update")
    acp.notify("session/cancel", {"sessionId": sid})
    _, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "cancelled"
    # Work the agent starts by itself reaches the client, its states as they came (the
    # agent starts it right after the turn: before or after the answer, as it is read).
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "later"}]})
    assert resp["result"]["stopReason"] == "end_turn"
    seen = updates(before, sid)
    if not any(u.get("state") == "idle" for u in seen):
        after, _ = acp.read_until(lambda m: m.get("method") == "session/update"
                                  and m["params"]["update"].get("state") == "idle")
        seen += updates(after, sid)
    assert "on my own" in _texts(seen)
    assert [u["state"] for u in seen if u["sessionUpdate"] == "state_update"] == \
        ["running", "idle"]
    _sent_to_agent(log)


def test_v1_client_restores_a_v2_agents_session(acp: AcpProcess, log: Path,
                                                tmp_path: Path) -> None:
    """A load after the session was closed: acpgate replays the conversation from its
    store and resumes the agent's session (v2's baseline resume)."""
    acp.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    work = _work(tmp_path)
    sid = acp.result("session/new", {"cwd": work})["sessionId"]
    acp.result("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "hello"}]})
    acp.result("session/close", {"sessionId": sid})
    before, resp = acp.call("session/load", {"sessionId": sid, "cwd": work, "mcpServers": []})
    assert "result" in resp, resp
    assert resp["result"]["modes"]["currentModeId"] == "ask"
    assert "echo: hello" in _texts(updates(before, sid))
    # acpgate replays from its store: the agent's resume (v1's) without a replay.
    resumes = [m for m in _sent_to_agent(log) if m.get("method") == "session/resume"]
    assert resumes and "replayFrom" not in resumes[-1]["params"]


def test_v2_client_on_a_v2_agent(acp: AcpProcess, log: Path, tmp_path: Path) -> None:
    acp.check = check_sent
    init = acp.result("initialize", {"protocolVersion": 2, "info": {"name": "c",
                                                                    "version": "1"}})
    assert init["protocolVersion"] == 2
    sid = acp.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
    _, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "hello"}]})
    assert "messageId" in resp["result"]
    after, idle = acp.read_until(
        lambda m: m.get("method") == "session/update"
        and m["params"]["update"].get("state") == "idle")
    assert idle["params"]["update"]["stopReason"] == "end_turn"
    kinds = _kinds(after, sid)
    assert "tool_call_update" in kinds and "plan_update" in kinds
    assert acp.result("auth/login", {"methodId": "key"}) == {}
    got = _sent_to_agent(log)
    assert any(m.get("method") == "auth/login" for m in got)


@pytest.mark.parametrize(("mode", "protocol", "expected"), [
    ("refuse2", '"auto"', 1), ("refuse2", "1", 1), ("v2only", "2", 2), ("v2", "1", 1),
    ("v2", "", 1)])
def test_negotiation(tmp_path: Path, log: Path, mode: str, protocol: str,
                     expected: int) -> None:
    """auto falls back to v1 when the agent refuses 2; 1 (the default) and 2 send only
    that version."""
    proc = _acp(tmp_path, log, mode, protocol)
    try:
        proc.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = proc.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
        before, resp = proc.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "hi"}]})
        assert resp["result"]["stopReason"] == "end_turn"
        text = "".join(_texts(updates(before, sid)))
        assert text == ("v1 echo: hi" if expected == 1 else "echo: hi")
        offers = [m["params"]["protocolVersion"] for m in received(str(log))
                  if m.get("method") == "initialize"]
        assert offers == {'"auto"': [2, 1], "1": [1], "2": [2], "": [1]}[protocol]
        if expected == 2:
            _sent_to_agent(log)
    finally:
        proc.close()
        proc.kill()


def test_v2_client_gets_a_v2_agents_own_forms(acp: AcpProcess, log: Path,
                                              tmp_path: Path) -> None:
    """Where both ends speak v2, what v1 cannot carry as it came reaches the client as the
    agent sent it: the notice, the plan with its id, the content chunk."""
    acp.check = check_sent
    acp.result("initialize", {"protocolVersion": 2, "info": {"name": "c", "version": "1"}})
    sid = acp.result("session/new", {"cwd": _work(tmp_path)})["sessionId"]
    before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "hello"}]})
    after, _ = acp.read_until(
        lambda m: m.get("method") == "session/update"
        and m["params"]["update"].get("state") == "idle")
    seen = updates([*before, *after], sid)
    notice = next(u for u in seen if u["sessionUpdate"] == "notice")
    assert (notice["severity"], notice["title"], notice["description"]) == (
        "info", "Heads up", "a notice")
    plan = next(u for u in seen if u["sessionUpdate"] == "plan_update")
    assert plan["plan"]["planId"] == "p1"
    chunk = next(u for u in seen if u["sessionUpdate"] == "tool_call_content_chunk")
    assert chunk == {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t1",
                     "content": {"type": "content",
                                 "content": {"type": "text", "text": "line 1"}}}
    assert "agent_thought_chunk" not in [u["sessionUpdate"] for u in seen]
