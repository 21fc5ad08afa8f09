"""The built-in agent's session tools: offered only when the client serves them,
one ACP extension request per call, the edge's answer or refusal handed to the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from services.common.jsonrpc import JsonRpcError
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say

SESSION_TOOLS = {"sessions_spawn", "sessions_list", "sessions_history", "sessions_send",
                 "session_status"}
EDGE_CAPS = {"protocolVersion": 1, "clientCapabilities": {"_meta": {"acpgate": {
    "sessionTools": True}}}}


def _offered(provider: ScriptedProvider) -> set[str]:
    return {spec.name for spec in provider.calls[-1][2]}


async def test_not_offered_to_a_client_that_does_not_serve_them(tmp_path: Path) -> None:
    provider = ScriptedProvider([say("hi")])
    async with running_agent(make_config(tmp_path), provider) as client:
        sid = await client.new_session(tmp_path)
        await client.prompt(sid, "hello")
    assert not SESSION_TOOLS & _offered(provider)
    assert "sessions_spawn" not in provider.calls[-1][0]  # nor in the system prompt


async def test_offered_behind_the_edge_and_asked_as_extension_requests(tmp_path: Path) -> None:
    provider = ScriptedProvider([
        call("sessions_list", {"filter": "beta"}, "c1"),
        call("session_status", {"sessionId": "other"}, "c2"),
        say("done")])
    answers: dict[str, Any] = {
        "_acpgate/sessions_list": {"sessions": [{"sessionId": "k", "agent": "beta"}]},
    }

    async def responder(method: str, params: dict[str, Any]) -> Any:
        if method in answers:
            return answers[method]
        if method == "_acpgate/session_status":
            raise JsonRpcError(-32000, f"Session not found: {params['targetSessionId']}")
        return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

    async with running_agent(make_config(tmp_path, autonomy="full"), provider,
                             responder) as client:
        await client.call("initialize", EDGE_CAPS)
        sid = await client.new_session(tmp_path)
        result = await client.prompt(sid, "look around")
        assert result["stopReason"] == "end_turn"
        sent = [(m, p) for m, p in client.requests if m.startswith("_acpgate/")]
        assert sent == [
            ("_acpgate/sessions_list", {"sessionId": sid, "filter": "beta", "limit": 20}),
            ("_acpgate/session_status", {"sessionId": sid, "targetSessionId": "other"}),
        ]
        done = {u["toolCallId"]: u for u in client.of("tool_call_update")}
        assert done["c1"]["status"] == "completed"
        assert json.loads(done["c1"]["rawOutput"]) == answers["_acpgate/sessions_list"]
        assert done["c2"]["status"] == "failed"
        assert done["c2"]["rawOutput"] == "Session not found: other"
    assert SESSION_TOOLS <= _offered(provider)
    system = provider.calls[0][0]
    assert "sessions_spawn" in system and "a (builtin)" in system


async def test_spawn_and_send_are_approved_like_commands_and_not_offered_readonly(
        tmp_path: Path) -> None:
    provider = ScriptedProvider([
        call("sessions_spawn", {"agent": "a", "prompt": "do it", "wait": False}, "c1"),
        call("sessions_send", {"sessionId": "k", "message": "hi", "wait": "soon"}, "c2"),
        say("ok")])

    async def responder(method: str, params: dict[str, Any]) -> Any:
        if method == "_acpgate/sessions_spawn":
            return {"sessionId": "k", "agent": "a", "status": "running"}
        return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

    async with running_agent(make_config(tmp_path), provider, responder) as client:
        await client.call("initialize", EDGE_CAPS)
        sid = await client.new_session(tmp_path)
        await client.prompt(sid, "delegate")
        methods = [m for m, _ in client.requests]
        # supervised: the permission request comes before the spawn itself
        assert methods[:2] == ["session/request_permission", "_acpgate/sessions_spawn"]
        assert client.requests[1][1] == {"sessionId": sid, "agent": "a", "prompt": "do it",
                                         "cwd": "", "label": "", "wait": False}
        done = {u["toolCallId"]: u for u in client.of("tool_call_update")}
        assert done["c2"]["status"] == "failed"
        assert done["c2"]["rawOutput"] == "argument `wait` must be true or false"
        assert "_acpgate/sessions_send" not in methods

    readonly = ScriptedProvider([say("no")])
    async with running_agent(make_config(tmp_path, autonomy="readonly"), readonly) as client:
        await client.call("initialize", EDGE_CAPS)
        sid = await client.new_session(tmp_path)
        await client.prompt(sid, "delegate")
    offered = _offered(readonly)
    assert "sessions_spawn" not in offered and "sessions_send" not in offered
    assert {"sessions_list", "sessions_history", "session_status"} <= offered
