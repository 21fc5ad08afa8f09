"""ACP ``session/fork`` for every agent, through ``acpgate acp``.

- The built-in agent (on a local fake model): the fork's first model call carries the
  parent's conversation, and from then on the two conversations go their own ways — in
  the agent's context and in the store (a load of each replays its own).
- An SDK agent that cannot fork: acpgate's own fork — a fresh adapter gets the parent's
  transcript with the fork's first prompt.
- An SDK agent that forks natively (it keeps its sessions in a file, as claude-agent-acp
  keeps them on disk): its ``session/fork`` runs in the fork's own fresh process, never in
  the parent's; when that process does not know the parent, acpgate forks itself.
- The result carries ``_meta.acpgate.forkedFrom``; so does the fork's ``session/list`` row;
  ``initialize`` advertises ``sessionCapabilities.fork``; a refused fork leaves nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import schema as acp_schema
from pydantic import TypeAdapter

from services.common.protocol import MSG_FORK_CWD, MSG_SESSION_LIMIT
from tests.agent.fake_http import Recorded, Reply
from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply
from tests.e2e.harness import SDK_AGENT, AcpProcess, streamed_text, updates, write_config

pytestmark = pytest.mark.slow


def sdk_fork_entry(alias: str, state: Path, mode: str = "1") -> str:
    """An SDK agent that advertises ``sessionCapabilities.fork`` (its sessions in ``state``;
    ``mode`` "die": it exits when asked to fork)."""
    return f"""
[agents.{alias}]
kind = "acp"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SDK_AGENT))}]
env = {{ SDK_AGENT_STATE = {json.dumps(str(state))}, SDK_AGENT_RESTORE = "resume", SDK_AGENT_FORK = "{mode}" }}
"""


def fork(acp: AcpProcess, sid: str, **params: Any) -> dict[str, Any]:
    """``session/fork``; its result, checked against the official SDK's model."""
    result: dict[str, Any] = acp.result("session/fork", {"sessionId": sid, **params})
    TypeAdapter(acp_schema.ForkSessionResponse).validate_python(result)
    assert result["sessionId"] != sid
    assert result["_meta"]["acpgate"]["forkedFrom"] == sid
    return result


def says(acp: AcpProcess, sid: str, prompt: str) -> str:
    """The reply text of one prompt turn, as streamed (an external agent's result carries no
    ``content``: it is passed whole)."""
    before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": prompt})
    assert resp["result"]["stopReason"] == "end_turn", resp
    return streamed_text(before, sid)


def user_texts(request: Recorded) -> list[str]:
    """The user messages one model call carried."""
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


def replayed_prompts(acp: AcpProcess, sid: str) -> list[str]:
    replay, resp = acp.call("session/load", {"sessionId": sid})
    assert "result" in resp, resp
    return [u["content"]["text"] for u in updates(replay, sid)
            if u["sessionUpdate"] == "user_message_chunk"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_builtin_agent_fork_starts_from_the_parents_conversation(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")

    def answer(request: Recorded) -> Reply:
        return text_reply(f"reply {len(user_texts(request))}")

    with ModelServer([], answer) as model:
        cfg = write_config(tmp_path / "cfg", default_agent="fake", max_sessions=10,
                           extra=agent_entry("fake", model))
        acp = AcpProcess(cfg)
        try:
            caps = acp.result("initialize", {"protocolVersion": 1})["agentCapabilities"]
            assert caps["sessionCapabilities"]["fork"] == {}
            parent = acp.new_session(cwd=str(work))
            assert says(acp, parent, "first message") == "reply 1"
            assert says(acp, parent, "second message") == "reply 2"
            acp.result("session/set_mode", {"sessionId": parent, "modeId": "readonly"})

            forked = fork(acp, parent, cwd=str(work))
            child = forked["sessionId"]
            assert forked["modes"]["currentModeId"] == "readonly"  # the parent's, set again
            assert says(acp, child, "in the fork") == "reply 3"
            assert user_texts(model.requests[-1]) == ["first message", "second message",
                                                      "in the fork"]
            assert says(acp, parent, "in the parent") == "reply 3"
            assert user_texts(model.requests[-1]) == ["first message", "second message",
                                                      "in the parent"]

            rows = {r["sessionId"]: r for r in acp.result("session/list", {})["sessions"]}
            assert rows[child]["_meta"]["acpgate"]["forkedFrom"] == parent
            assert "forkedFrom" not in rows[parent]["_meta"]["acpgate"]
            assert rows[child]["cwd"] == rows[parent]["cwd"] == str(work.resolve())

            acp.result("session/close", {"sessionId": child})
            acp.result("session/close", {"sessionId": parent})
            assert replayed_prompts(acp, child) == ["first message", "second message",
                                                    "in the fork"]
            assert replayed_prompts(acp, parent) == ["first message", "second message",
                                                     "in the parent"]
            assert acp.close() == 0
        finally:
            acp.kill()


def test_an_agent_that_cannot_fork_gets_acpgates_fork(tmp_path: Path, work: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg", max_sessions=10))
    try:
        parent = acp.new_session(agentAlias="sdknone", cwd=str(work))
        says(acp, parent, "first message")
        child = fork(acp, parent, cwd=str(work))["sessionId"]
        # A fresh adapter, the transcript carried with the first prompt.
        assert says(acp, child, "recall") == "remembered 0 [] text:prior-ok"
        assert says(acp, child, "pid") != says(acp, parent, "pid")
        assert acp.close() == 0
    finally:
        acp.kill()


def test_a_native_fork_runs_in_the_forks_own_adapter(tmp_path: Path, work: Path) -> None:
    state = tmp_path / "fork-state.json"
    cfg = write_config(tmp_path / "cfg", max_sessions=10,
                       extra=sdk_fork_entry("sdkfork", state))
    acp = AcpProcess(cfg)
    try:
        parent = acp.new_session(agentAlias="sdkfork", cwd=str(work))
        says(acp, parent, "first message")
        says(acp, parent, "second")
        acp.result("session/set_mode", {"sessionId": parent, "modeId": "code"})
        forked = fork(acp, parent, cwd=str(work))
        child = forked["sessionId"]
        assert forked["modes"]["currentModeId"] == "code"
        # The agent's own fork: it knows the parent's turns, nothing was carried over.
        assert says(acp, child, "recall") == "remembered 2 [first message|second] no-embedded"
        assert says(acp, child, "pid") != says(acp, parent, "pid")
        # Closing the parent leaves the fork running: it has its own process and lease.
        acp.result("session/close", {"sessionId": parent})
        assert says(acp, child, "after the parent closed") == "echo: after the parent closed"

        # An agent process that does not know the parent refuses its fork: acpgate forks.
        state.write_text("{}")
        again = fork(acp, child, cwd=str(work))["sessionId"]
        assert says(acp, again, "recall") == "remembered 0 [] text:prior-ok"
        assert acp.close() == 0
    finally:
        acp.kill()


def test_a_fork_whose_agent_fails_is_deleted_again(tmp_path: Path, work: Path) -> None:
    """The fork's row (and its copy of the history) was written before its adapter failed:
    it is gone again before the client hears of the failure, which names the cause."""
    cfg = write_config(tmp_path / "cfg", max_sessions=10,
                       extra=sdk_fork_entry("sdkdies", tmp_path / "state.json", "die"))
    acp = AcpProcess(cfg)
    try:
        parent = acp.new_session(agentAlias="sdkdies", cwd=str(work))
        says(acp, parent, "first message")
        error = acp.error("session/fork", {"sessionId": parent, "cwd": str(work)})
        assert error["code"] == -32603, error
        assert error["message"].startswith("Failed to fork session: agent process exited")
        assert error["data"]["acpgate"]["exit"]["exitCode"] == 5
        listed = [r["sessionId"] for r in acp.result("session/list", {})["sessions"]]
        assert listed == [parent]
        assert says(acp, parent, "still here") == "echo: still here"
        assert acp.close() == 0
    finally:
        acp.kill()


def test_refused_forks_leave_nothing(tmp_path: Path, work: Path) -> None:
    acp = AcpProcess(write_config(tmp_path / "cfg", max_sessions=2))
    try:
        parent = acp.new_session(cwd=str(work))
        says(acp, parent, "hello")
        missing = acp.error("session/fork", {"sessionId": "no-such-session", "cwd": str(work)})
        assert missing == {"code": -32000, "message": "Session not found: no-such-session"}
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        moved = acp.error("session/fork", {"sessionId": parent, "cwd": str(elsewhere)})
        assert moved == {"code": -32602, "message": MSG_FORK_CWD.format(
            workspace=work.resolve(), cwd=elsewhere)}
        assert acp.error("session/fork", {"cwd": str(work)})["code"] == -32602
        second = acp.new_session(cwd=str(work))
        full = acp.error("session/fork", {"sessionId": parent, "cwd": str(work)})
        assert full == {"code": -32001, "message": MSG_SESSION_LIMIT.format(max=2)}
        listed = {r["sessionId"] for r in acp.result("session/list", {})["sessions"]}
        assert listed == {parent, second}
        assert acp.close() == 0
    finally:
        acp.kill()
