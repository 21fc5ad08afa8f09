"""A v2 client through ``acpgate acp`` (stdio) on the built-in agent (a v1 agent).

Every message acpgate sends on the connection is checked against the vendored v2 schema
(:func:`tests.v2schema.check_sent`); the rows check what v2 says on top of the shapes:
negotiation, the prompt lifecycle, upserts, permission requests, modes as a config
option, resume with replay, idempotency keys, batches, v2's errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import AcpProcess, write_config
from tests.v2schema import check_sent

pytestmark = pytest.mark.slow

CLIENT_INFO = {"name": "v2-test-client", "version": "1.0"}


def _v2(acp: AcpProcess) -> dict[str, Any]:
    acp.check = check_sent
    result: dict[str, Any] = acp.result("initialize", {"protocolVersion": 2,
                                                       "info": CLIENT_INFO})
    return result


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("v2") / "cfg", max_sessions=10)


@pytest.fixture(scope="module")
def acp(cfg: Path) -> Iterator[AcpProcess]:
    proc = AcpProcess(cfg)
    _v2(proc)
    yield proc
    assert proc.close() == 0
    proc.kill()


@pytest.fixture
def sid(acp: AcpProcess, tmp_path: Path) -> Iterator[str]:
    session_id = str(acp.result("session/new", {"cwd": str(tmp_path)})["sessionId"])
    yield session_id
    acp.handlers.clear()
    acp.call("session/close", {"sessionId": session_id})


def _updates(messages: list[Any], sid: str) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in messages if isinstance(m, dict)
            and m.get("method") == "session/update" and m["params"]["sessionId"] == sid]


def _until_idle(acp: AcpProcess, sid: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The session's updates up to its idle state_update, and that one."""
    before, idle = acp.read_until(
        lambda m: m.get("method") == "session/update" and m["params"]["sessionId"] == sid
        and m["params"]["update"].get("sessionUpdate") == "state_update"
        and m["params"]["update"].get("state") == "idle")
    return _updates(before, sid), idle["params"]["update"]


def _prompt(acp: AcpProcess, sid: str, text: str, **extra: Any) -> dict[str, Any]:
    """Prompt; the updates before the answer, the answer, the updates to idle, idle."""
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": text}], **extra})
    assert "result" in resp, resp
    after, idle = _until_idle(acp, sid)
    return {"before": _updates(before, sid), "result": resp["result"], "after": after,
            "idle": idle}


# ----------------------------------------------------------------- negotiation


def test_initialize_v2_shape(cfg: Path) -> None:
    proc = AcpProcess(cfg)
    try:
        init = _v2(proc)
        assert init["protocolVersion"] == 2
        assert init["info"]["name"] == "acpgate"
        session = init["capabilities"]["session"]
        assert session["prompt"]["embeddedContext"] == {} and session["mcp"]["stdio"] == {}
        assert session["delete"] == {} and session["additionalDirectories"] == {}
        assert init["authMethods"] == []
        assert "agentCapabilities" not in init and "agentInfo" not in init
    finally:
        proc.close()
        proc.kill()


@pytest.mark.parametrize(("asked", "answered"), [(1, 1), (2, 2), (7, 2), (None, 1)])
def test_highest_version_at_or_below_the_clients(cfg: Path, asked: int | None,
                                                 answered: int) -> None:
    proc = AcpProcess(cfg)
    try:
        params = {} if asked is None else {"protocolVersion": asked, "info": CLIENT_INFO}
        assert proc.result("initialize", params)["protocolVersion"] == answered
    finally:
        proc.close()
        proc.kill()


def test_no_version_fits_is_32022(cfg: Path) -> None:
    proc = AcpProcess(cfg)
    proc.check = check_sent
    try:
        error = proc.error("initialize", {"protocolVersion": 0, "info": CLIENT_INFO})
        assert error["code"] == -32022
        assert error["data"] == {"requested": 0, "supported": [1, 2]}
    finally:
        proc.close()
        proc.kill()


# ----------------------------------------------------------------- prompt lifecycle


def test_prompt_acknowledged_then_reported(acp: AcpProcess, sid: str) -> None:
    turn = _prompt(acp, sid, "hello there")
    message_id = turn["result"]["messageId"]
    # (the demo agent's commands, advertised right after the session/new answer, may
    # still be on their way when the prompt goes out)
    before = [u for u in turn["before"] if u["sessionUpdate"] != "available_commands_update"]
    assert [u["sessionUpdate"] for u in before] == ["state_update", "user_message_chunk"]
    assert before[0]["state"] == "running"
    assert before[1]["messageId"] == message_id
    assert before[1]["content"] == {"type": "text", "text": "hello there"}
    chunks = [u for u in turn["after"] if u["sessionUpdate"] == "agent_message_chunk"]
    assert chunks and all(c["messageId"] for c in chunks)
    assert turn["idle"]["stopReason"] == "end_turn"
    kinds = {u["sessionUpdate"] for u in turn["after"]}
    assert not kinds & {"prompt_received", "turn_complete", "tool_call", "plan"}


def test_plan_and_tool_calls_are_upserts(acp: AcpProcess, sid: str) -> None:
    turn = _prompt(acp, sid, "plan")
    kinds = [u["sessionUpdate"] for u in turn["after"]]
    assert "tool_call" not in kinds and "plan" not in kinds
    plans = [u for u in turn["after"] if u["sessionUpdate"] == "plan_update"]
    assert plans and plans[0]["plan"]["type"] == "items" and plans[0]["plan"]["planId"]
    assert plans[0]["plan"]["entries"]
    calls = [u for u in turn["after"] if u["sessionUpdate"] == "tool_call_update"]
    assert calls and calls[0]["toolCallId"] and calls[0].get("title")


def test_permission_request_has_title_and_subject(acp: AcpProcess, sid: str) -> None:
    acp.handlers["session/request_permission"] = \
        lambda p: {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
    start = len(acp.outbound)
    turn = _prompt(acp, sid, "!echo v2-perm")
    asked = acp.outbound[start:]
    assert len(asked) == 1
    params = asked[0]["params"]
    assert params["title"] and "toolCall" not in params
    assert params["subject"]["type"] == "tool_call"
    assert params["subject"]["toolCall"]["toolCallId"]
    states = [u["state"] for u in turn["after"] if u["sessionUpdate"] == "state_update"]
    assert states[:2] == ["requires_action", "running"]
    assert turn["idle"]["stopReason"] == "end_turn"


def test_cancel_ends_idle_cancelled(acp: AcpProcess, sid: str) -> None:
    acp.handlers["session/request_permission"] = lambda p: None  # never answered
    acp.call("session/prompt", {"sessionId": sid, "prompt": [
        {"type": "text", "text": "!echo never"}]})
    acp.read_until(lambda m: m.get("method") == "session/request_permission")
    acp.notify("session/cancel", {"sessionId": sid})
    _, idle = _until_idle(acp, sid)
    assert idle["stopReason"] == "cancelled"


def test_idempotency_key_runs_once(acp: AcpProcess, sid: str) -> None:
    first = _prompt(acp, sid, "once only", idempotencyKey="k-1")
    _, again = acp.call("session/prompt", {"sessionId": sid, "idempotencyKey": "k-1",
                                           "prompt": [{"type": "text", "text": "once only"}]})
    assert again["result"] == first["result"]
    # Nothing ran: the next prompt's own lifecycle is the next thing the session reports.
    nxt = _prompt(acp, sid, "next")
    assert nxt["before"][0]["sessionUpdate"] == "state_update"
    assert nxt["before"][1]["content"]["text"] == "next"


# ----------------------------------------------------------------- modes, errors


def test_modes_are_a_mode_config_option(acp: AcpProcess, tmp_path: Path) -> None:
    new = acp.result("session/new", {"cwd": str(tmp_path)})
    sid = new["sessionId"]
    assert "modes" not in new
    mode = next(o for o in new["configOptions"] if o.get("category") == "mode")
    other = next(o["value"] for o in mode["options"] if o["value"] != mode["currentValue"])
    out = acp.result("session/set_config_option", {"sessionId": sid, "configId":
                                                   mode["configId"], "type": "id",
                                                   "value": other})
    assert next(o for o in out["configOptions"]
                if o["configId"] == mode["configId"])["currentValue"] == other
    assert acp.error("session/set_mode", {"sessionId": sid, "modeId": other})["code"] == -32601
    assert acp.error("session/load", {"sessionId": sid, "cwd": str(tmp_path),
                                      "mcpServers": []})["code"] == -32601
    acp.call("session/close", {"sessionId": sid})


def test_session_not_found_is_32002(acp: AcpProcess, tmp_path: Path) -> None:
    error = acp.error("session/prompt", {"sessionId": "nope-not-here", "prompt": [
        {"type": "text", "text": "x"}]})
    assert error["code"] == -32002 and error["data"] == {"sessionId": "nope-not-here"}
    error = acp.error("session/resume", {"sessionId": "nope-not-here", "cwd": str(tmp_path)})
    assert error["code"] == -32002 and error["data"] == {"sessionId": "nope-not-here"}


def test_mcp_entry_without_type_refused(acp: AcpProcess, tmp_path: Path) -> None:
    error = acp.error("session/new", {"cwd": str(tmp_path), "mcpServers": [
        {"name": "x", "command": "/bin/true", "args": [], "env": []}]})
    assert error["code"] == -32602 and "type" in error["message"]


# ----------------------------------------------------------------- resume


def test_resume_replays_from_start(acp: AcpProcess, tmp_path: Path) -> None:
    sid = acp.result("session/new", {"cwd": str(tmp_path)})["sessionId"]
    _prompt(acp, sid, "remember me")
    acp.result("session/close", {"sessionId": sid})
    before, resp = acp.call("session/resume", {"sessionId": sid, "cwd": str(tmp_path),
                                               "replayFrom": {"type": "start"}})
    assert "result" in resp, resp
    got = _updates(before, sid)
    kinds = [u["sessionUpdate"] for u in got]
    assert kinds[-2:] == ["replay_complete", "state_update"] and got[-1]["state"] == "idle"
    users = [u for u in got if u["sessionUpdate"] == "user_message_chunk"]
    assert users and users[0]["content"]["text"] == "remember me" and users[0]["messageId"]
    assert resp["result"]["_meta"]["acpgate"]["replay"] == "full"
    acp.result("session/close", {"sessionId": sid})
    # No replayFrom: nothing replayed, the state before the answer.
    before, resp = acp.call("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
    assert [u["sessionUpdate"] for u in _updates(before, sid) if u["sessionUpdate"]
            not in ("plan_update", "available_commands_update")] == ["state_update"]
    assert acp.error("session/resume", {"sessionId": sid, "cwd": str(tmp_path),
                                        "replayFrom": {"type": "middle"}})["code"] == -32602
    acp.call("session/close", {"sessionId": sid})


# ----------------------------------------------------------------- batches


def test_batch_answered_as_one_array(acp: AcpProcess, sid: str) -> None:
    batch = [{"jsonrpc": "2.0", "id": "b1", "method": "session/list", "params": {}},
             {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}},
             {"jsonrpc": "2.0", "id": "b2", "method": "session/list", "params": {}}, 5]
    acp.send_raw(json.dumps(batch))
    acp._sent_methods.update({"b1": "session/list", "b2": "session/list"})
    _, answer = acp.read_until(lambda m: isinstance(m, list))
    by_id = {a["id"]: a for a in answer}
    assert set(by_id) == {"b1", "b2", None}
    assert "sessions" in by_id["b1"]["result"] and by_id[None]["error"]["code"] == -32600
    acp.send_raw("[]")
    _, empty = acp.read_until(lambda m: not isinstance(m, list) and m.get("id", 0) is None)
    assert empty["error"]["code"] == -32600
