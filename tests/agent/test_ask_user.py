"""ask_user (SPEC §6): choices as permission options or elicitation; no choices fails at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say


async def test_no_choices_fails_immediately(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(tmp_path / "ws")
        result = await c.prompt(sid, "ask What now?")
    assert result["stopReason"] == "end_turn"
    assert c.requests == []
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "requires `choices`" in update["rawOutput"]


async def test_choices_become_permission_options(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()

    async def pick_second(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": "choice-1"}}

    provider = ScriptedProvider([call("ask_user", {"question": "Which?",
                                                   "choices": ["red", "blue"]}), say("ok")])
    async with running_agent(make_config(tmp_path), provider, pick_second) as c:
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "x")
    ((method, params),) = c.requests
    assert method == "session/request_permission"
    assert params["options"] == [
        {"optionId": "choice-0", "name": "red", "kind": "allow_once"},
        {"optionId": "choice-1", "name": "blue", "kind": "allow_once"}]
    assert params["toolCall"]["toolCallId"].startswith("approval-")
    assert params["toolCall"]["title"] == "Which?"
    assert params["toolCall"]["kind"] == "execute"  # §6: the same request as an approval
    assert provider.calls[1][1][-1].text == "The user answered: blue"


async def test_elicitation_form_when_advertised(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()

    async def fill(method: str, params: dict[str, Any]) -> Any:
        return {"action": "accept", "content": {"answer": "blue"}}

    provider = ScriptedProvider([call("ask_user", {"question": "Which?",
                                                   "choices": ["red", "blue"]}), say("ok")])
    async with running_agent(make_config(tmp_path), provider, fill) as c:
        await c.call("initialize", {"protocolVersion": 1,
                                    "clientCapabilities": {"elicitation": {"form": {}}}})
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "x")
        ((method, params),) = c.requests
        assert method == "elicitation/create"
        assert params["mode"] == "form" and params["sessionId"] == sid
        assert params["message"] == "Which?"
        schema = params["requestedSchema"]
        assert schema["required"] == ["answer"]
        assert schema["properties"]["answer"]["oneOf"] == [{"const": "red", "title": "red"},
                                                           {"const": "blue", "title": "blue"}]
        assert provider.calls[1][1][-1].text == "The user answered: blue"


async def test_dismissed_question(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()

    async def dismiss(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "cancelled"}}

    async with running_agent(make_config(tmp_path), responder=dismiss) as c:
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "ask Pick one | a | b")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "dismissed" in update["rawOutput"]


async def test_question_cancelled_by_the_edge_is_not_a_dismissal(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    reasons = iter(["timeout", "client_gone"])

    async def edge_cancel(method: str, params: dict[str, Any]) -> Any:
        return {"outcome": {"outcome": "cancelled"},
                "_meta": {"acpgate": {"reason": next(reasons)}}}

    async with running_agent(make_config(tmp_path), responder=edge_cancel) as c:
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "ask Pick one | a | b")
        await c.prompt(sid, "ask Pick again | a | b")
    outputs = [u["rawOutput"] for u in c.of("tool_call_update")]
    assert outputs == ["The user did not answer in time.",
                       "The question could not be asked: the client failed or left"]
