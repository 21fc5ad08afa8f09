"""escalate_to_human (SPEC §6, the seed's "ask_user/escalate_to_human" back-channel): the
human approves or rejects a decision; anything but an approval is a denial, with its cause."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from services.agent.tools.escalate import EscalateToHumanTool
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say

ESCALATE = {"summary": "Force-push over main?", "context": "3 commits would be lost",
            "urgency": "critical"}


def answering(result: Any) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
    """A client that answers every request with ``result``."""
    async def respond(method: str, params: dict[str, Any]) -> Any:
        return result
    return respond


async def _escalate(tmp_path: Path, responder: Any, args: dict[str, Any] = ESCALATE, *,
                    autonomy: str = "supervised", elicitation: bool = False) -> Any:
    (tmp_path / "ws").mkdir(exist_ok=True)
    provider = ScriptedProvider([call("escalate_to_human", args), say("ok")])
    async with running_agent(make_config(tmp_path, autonomy=autonomy), provider, responder) as c:
        if elicitation:
            await c.call("initialize", {"protocolVersion": 1,
                                        "clientCapabilities": {"elicitation": {"form": {}}}})
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "x")
    return c, provider


async def test_permission_request_and_approval(tmp_path: Path) -> None:
    c, provider = await _escalate(tmp_path, answering(
        {"outcome": {"outcome": "selected", "optionId": "allow-once"}}))
    ((method, params),) = c.requests  # the escalation only: no approval of the tool itself
    assert method == "session/request_permission"
    assert params["options"] == [
        {"optionId": "allow-once", "name": "Approve", "kind": "allow_once"},
        {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}]
    tool_call = params["toolCall"]
    assert tool_call["toolCallId"].startswith("approval-") and tool_call["kind"] == "execute"
    assert tool_call["title"] == "[CRITICAL] Force-push over main?"
    assert tool_call["rawInput"] == {"tool": "escalate_to_human", **ESCALATE}
    text = tool_call["content"][0]["content"]["text"]
    assert "Summary: Force-push over main?" in text and "Context: 3 commits would be lost" in text
    (update,) = c.of("tool_call_update")
    assert update["status"] == "completed" and update["name"] == "escalate_to_human"
    assert provider.calls[1][1][-1].text == "The user approved the escalation: go on."


@pytest.mark.parametrize(("answer", "expected"), [
    ({"outcome": {"outcome": "selected", "optionId": "reject-once"}},
     "The user rejected the escalation: do not go on with it."),
    ({"outcome": {"outcome": "cancelled"}},
     "The user dismissed the escalation without deciding: treat it as denied."),
    ({"outcome": {"outcome": "cancelled"},
      "_meta": {"acpgate": {"reason": "timeout", "timeoutSecs": 7}}},
     "The escalation was denied automatically: the user gave no answer within 7 seconds."),
    ({"outcome": {"outcome": "cancelled"}, "_meta": {"acpgate": {"reason": "client_gone"}}},
     "The escalation was denied automatically: it could not be answered (the client failed "
     "or left)."),
    ("garbage", "The user dismissed the escalation without deciding: treat it as denied."),
])
async def test_every_other_answer_denies(tmp_path: Path, answer: Any, expected: str) -> None:
    c, provider = await _escalate(tmp_path, answering(answer))
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and update["rawOutput"] == expected
    assert provider.calls[1][1][-1].text == expected and provider.calls[1][1][-1].failed


async def test_no_answer_in_time_denies(tmp_path: Path) -> None:
    async def never(method: str, params: dict[str, Any]) -> Any:
        await asyncio.sleep(3600)

    (tmp_path / "ws").mkdir()
    provider = ScriptedProvider([call("escalate_to_human", ESCALATE), say("ok")])
    async with running_agent(make_config(tmp_path, timeout=1), provider, never) as c:
        sid = await c.new_session(tmp_path / "ws")
        await c.prompt(sid, "x")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed"
    assert update["rawOutput"] == ("The escalation was denied automatically: the user gave no "
                                   "answer within 1 seconds.")


@pytest.mark.parametrize("autonomy", ["readonly", "full"])
async def test_every_autonomy_level_asks(tmp_path: Path, autonomy: str) -> None:
    c, provider = await _escalate(tmp_path, answering(
        {"outcome": {"outcome": "selected", "optionId": "allow-once"}}), autonomy=autonomy)
    assert "escalate_to_human" in [t.name for t in provider.calls[0][2]]  # offered in readonly
    assert [m for m, _ in c.requests] == ["session/request_permission"]  # full asks too
    assert provider.calls[1][1][-1].text == "The user approved the escalation: go on."


async def test_elicitation_form_with_reply(tmp_path: Path) -> None:
    c, provider = await _escalate(tmp_path, answering(
        {"action": "accept", "content": {"decision": "reject", "reply": "use a\nbranch"}}),
        elicitation=True)
    ((method, params),) = c.requests
    assert method == "elicitation/create" and params["mode"] == "form"
    schema = params["requestedSchema"]
    assert schema["required"] == ["decision"] and schema["title"] == \
        "[CRITICAL] Force-push over main?"
    assert schema["properties"]["decision"]["oneOf"] == [
        {"const": "approve", "title": "Approve"}, {"const": "reject", "title": "Reject"}]
    assert schema["properties"]["reply"]["type"] == "string"
    assert "Summary: Force-push over main?" in params["message"]
    assert provider.calls[1][1][-1].text == ("The user rejected the escalation: do not go on "
                                             "with it. Their reply: use a branch")


@pytest.mark.parametrize(("answer", "expected"), [
    ({"action": "accept", "content": {"decision": "approve"}},
     "The user approved the escalation: go on."),
    ({"action": "decline"}, "The user rejected the escalation: do not go on with it."),
    ({"action": "cancel"},
     "The escalation was not answered (dismissed, or no answer in time): treat it as denied."),
    ({"action": "accept", "content": {"decision": "maybe"}},
     "The user rejected the escalation: do not go on with it."),
])
async def test_elicitation_answers(tmp_path: Path, answer: Any, expected: str) -> None:
    _, provider = await _escalate(tmp_path, answering(answer), elicitation=True)
    assert provider.calls[1][1][-1].text == expected


@pytest.mark.parametrize(("args", "error"), [
    ({}, "missing required string argument `summary`"),
    ({"summary": "   "}, "missing required string argument `summary`"),
    ({"summary": "x", "urgency": "asap"},
     "invalid urgency 'asap': must be one of low, medium, high, critical"),
])
async def test_bad_arguments_fail_without_asking(tmp_path: Path, args: dict[str, Any],
                                                 error: str) -> None:
    c, _ = await _escalate(tmp_path, answering(None), args)
    assert c.requests == []
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and update["rawOutput"] == error


def test_the_tool_never_needs_approval_and_is_not_mutating() -> None:
    tool = EscalateToHumanTool()
    assert tool.interactive and not tool.mutating
    assert tool.parameters["required"] == ["summary"]
