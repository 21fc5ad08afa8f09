"""SPEC §6 permission relay through the edge, with the built-in demo agent (`!<command>`).

The agent's ``session/request_permission`` is re-issued to the client with a
``zc-out-N`` id and our session id; the client's answer (or its absence) goes
back to the agent under the agent's own id.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import PERMISSION_OPTIONS
from tests.e2e.harness import AcpProcess, gone, updates, write_config

pytestmark = pytest.mark.slow

ZC_OUT = re.compile(r"^zc-out-\d+$")


def project_dir(tmp_path: Path) -> Path:
    """A session cwd beside the config dir (a cwd containing it would be refused)."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return project


@pytest.fixture(scope="module")
def acp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AcpProcess]:
    proc = AcpProcess(write_config(tmp_path_factory.mktemp("perm") / "cfg", max_sessions=10))
    yield proc
    assert proc.close() == 0
    proc.kill()


@pytest.fixture
def sid(acp: AcpProcess, tmp_path: Path) -> Iterator[str]:
    session_id = acp.new_session(agentAlias="demo", cwd=str(tmp_path))
    yield session_id
    acp.handlers.clear()
    acp.call("session/close", {"sessionId": session_id})


def _answer(option: str | None) -> Any:
    if option is None:
        return lambda params: {"outcome": {"outcome": "cancelled"}}
    return lambda params: {"outcome": {"outcome": "selected", "optionId": option}}


def _turn(acp: AcpProcess, sid: str, prompt: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    start = len(acp.outbound)
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": prompt})
    return acp.outbound[start:], {"before": before, "result": resp.get("result"),
                                  "error": resp.get("error")}


def _tool_updates(turn: dict[str, Any], sid: str) -> list[dict[str, Any]]:
    return [u for u in updates(turn["before"], sid)
            if u["sessionUpdate"] in ("tool_call", "tool_call_update")]


def test_allow_once_relays_exact_request(acp: AcpProcess, sid: str) -> None:
    acp.handlers["session/request_permission"] = _answer("allow-once")
    asked, turn = _turn(acp, sid, "!echo relay-ok")
    assert len(asked) == 1
    req = asked[0]
    assert isinstance(req["id"], str) and ZC_OUT.match(req["id"])
    params = req["params"]
    assert params["sessionId"] == sid
    assert params["options"] == [dict(o) for o in PERMISSION_OPTIONS]
    tc = params["toolCall"]
    assert tc["toolCallId"].startswith("approval-") and tc["title"] == "Approve shell?"
    assert tc["kind"] == "execute" and tc["status"] == "pending"
    # SPEC §6's tool + summary, plus the complete arguments so a client can show them all.
    assert tc["rawInput"] == {"tool": "shell", "summary": "echo relay-ok",
                              "arguments": {"command": "echo relay-ok"}}
    assert tc["content"] == [{"type": "content", "content": {"type": "text", "text": "echo relay-ok"}}]
    assert turn["result"]["stopReason"] == "end_turn"
    tools = _tool_updates(turn, sid)
    call = next(u for u in tools if u["sessionUpdate"] == "tool_call")
    done = next(u for u in tools if u["sessionUpdate"] == "tool_call_update")
    assert call["name"] == "shell" and call["kind"] == "execute" and call["status"] == "pending"
    assert call["rawInput"] == {"command": "echo relay-ok"}
    assert done["toolCallId"] == call["toolCallId"] and done["status"] == "completed"
    assert "relay-ok" in str(done["rawOutput"]) and done["body"] == done["rawOutput"]
    # allow-once is not remembered: the next shell call asks again
    asked, _ = _turn(acp, sid, "!echo second")
    assert len(asked) == 1


def test_allow_always_is_remembered(acp: AcpProcess, sid: str) -> None:
    acp.handlers["session/request_permission"] = _answer("allow-always")
    asked, turn = _turn(acp, sid, "!echo one")
    assert len(asked) == 1 and turn["result"]["stopReason"] == "end_turn"
    asked, turn = _turn(acp, sid, "!echo two")
    assert asked == [], "allow-always approves the tool for the rest of the session"
    done = [u for u in _tool_updates(turn, sid) if u["sessionUpdate"] == "tool_call_update"]
    assert done and done[0]["status"] == "completed" and "two" in str(done[0]["rawOutput"])


@pytest.mark.parametrize("option", ["reject-once", None], ids=["reject", "cancelled"])
def test_reject_and_cancelled_deny_the_tool(acp: AcpProcess, sid: str, option: str | None) -> None:
    acp.handlers["session/request_permission"] = _answer(option)
    asked, turn = _turn(acp, sid, "!echo must-not-run")
    assert len(asked) == 1
    assert turn["result"]["stopReason"] == "end_turn", "the turn goes on after a denial"
    outputs = [str(u.get("rawOutput")) for u in _tool_updates(turn, sid)
               if u["sessionUpdate"] == "tool_call_update"]
    assert outputs and all("must-not-run" not in o or "denied" in o for o in outputs)
    assert "denied" in turn["result"]["content"] or any("denied" in o for o in outputs)


def test_client_error_answer_denies(acp: AcpProcess, sid: str) -> None:
    acp.handlers["session/request_permission"] = lambda params: None  # answered below
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "!echo err-path"})
    _, req = acp.read_until(lambda m: m.get("method") == "session/request_permission")
    acp.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -1, "message": "nope"}})
    before, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "end_turn"
    assert "denied" in resp["result"]["content"]
    # The edge tells the agent why (client_error), so the user is not blamed.
    failed = [u for u in updates(before, sid) if u["sessionUpdate"] == "tool_call_update"]
    assert failed and "the client failed or left" in str(failed[-1]["rawOutput"])
    assert "dismissed" not in str(failed[-1]["rawOutput"])


def test_per_direction_correlation(acp: AcpProcess, sid: str) -> None:
    """A client request reusing our outbound id is answered on its own; ours still resolves."""
    acp.handlers["session/request_permission"] = lambda params: None
    rid = acp.request_async("session/prompt", {"sessionId": sid, "prompt": "!echo corr"})
    _, req = acp.read_until(lambda m: m.get("method") == "session/request_permission")
    out_id = req["id"]
    _, own = acp.call_with_id("session/cancel", {"sessionId": "no-such"}, out_id)
    assert own == {"jsonrpc": "2.0", "id": out_id, "result": {}}
    acp.send({"jsonrpc": "2.0", "id": out_id,
              "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}})
    before, resp = acp.response(rid)
    assert resp["result"]["stopReason"] == "end_turn"
    assert any("corr" in str(u.get("rawOutput")) for u in updates(before, sid)
               if u["sessionUpdate"] == "tool_call_update")


def test_ask_user_choices(acp: AcpProcess, sid: str) -> None:
    def answer(params: dict[str, Any]) -> Any:
        ids = [o["optionId"] for o in params["options"]]
        if "allow-once" in ids:
            return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
        assert [o["name"] for o in params["options"]] == ["red", "blue"]
        return {"outcome": {"outcome": "selected", "optionId": "choice-1"}}

    acp.handlers["session/request_permission"] = answer
    asked, turn = _turn(acp, sid, "ask Which colour? | red | blue")
    assert any(o["optionId"] == "choice-1" for r in asked for o in r["params"]["options"])
    assert "blue" in turn["result"]["content"]


def test_timeout_denies_and_turn_goes_on(tmp_path: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg", session_timeout=1))
    try:
        sid = acp.new_session(agentAlias="demo", cwd=str(project_dir(tmp_path)))
        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "!echo too-late"})
        asked = [m for m in before if m.get("method") == "session/request_permission"]
        assert [m["id"] for m in asked] == ["zc-out-0"], "ids count from 0 per connection"
        assert resp["result"]["stopReason"] == "end_turn"
        assert "denied" in resp["result"]["content"]
        # Either timer may fire first (edge and agent share the timeout); neither blames the user.
        failed = [u for u in updates(before, sid) if u["sessionUpdate"] == "tool_call_update"]
        assert failed and "dismissed" not in str(failed[-1]["rawOutput"])
        assert "no answer within" in str(failed[-1]["rawOutput"])
        assert acp.close() == 0
    finally:
        acp.kill()


def test_client_gone_while_asked(tmp_path: Path) -> None:
    """EOF while a permission request is open: the edge exits 0 and leaves no child."""
    acp = AcpProcess(write_config(tmp_path / "cfg"))
    try:
        sid = acp.new_session(agentAlias="demo", cwd=str(project_dir(tmp_path)))
        acp.request_async("session/prompt", {"sessionId": sid, "prompt": "!sleep 30"})
        acp.read_until(lambda m: m.get("method") == "session/request_permission")
        children = [p.pid for p in acp.descendants()]
        assert children
        assert acp.close() == 0
        assert gone(children)
    finally:
        acp.kill()


def test_elicitation_relay_when_client_advertises_it(tmp_path: Path) -> None:
    """§2/§6: the client's elicitation capability reaches the agent; elicitation/create is relayed."""
    acp = AcpProcess(write_config(tmp_path / "cfg"))
    try:
        acp.result("initialize", {"protocolVersion": 1,
                                  "clientCapabilities": {"elicitation": {"form": {}}}})
        sid = acp.new_session(agentAlias="demo", cwd=str(project_dir(tmp_path)))

        def allow(params: dict[str, Any]) -> Any:
            return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

        acp.handlers["session/request_permission"] = allow
        acp.handlers["elicitation/create"] = \
            lambda params: {"action": "accept", "content": {"answer": "green"}}
        _, resp = acp.call("session/prompt",
                                {"sessionId": sid, "prompt": "ask Favourite? | red | green"})
        asks = [m for m in acp.outbound if m["method"] == "elicitation/create"]
        assert len(asks) == 1 and ZC_OUT.match(asks[0]["id"])
        assert asks[0]["params"]["sessionId"] == sid and asks[0]["params"]["mode"] == "form"
        assert "green" in resp["result"]["content"]
        assert acp.close() == 0
    finally:
        acp.kill()
