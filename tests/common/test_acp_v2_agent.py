"""The pure translation toward a v2 agent (services/common/acp/v2/agent_init, agent_wire)."""

from __future__ import annotations

import pytest

from services.common.acp.v2.agent_init import AgentSpeaksV1, offer, read_answer
from services.common.acp.v2.agent_wire import AgentWire
from services.common.acp.v2.names import PROTOCOL_AUTO
from tests.v2schema import validate_v2

V1_INIT = {"protocolVersion": 1, "clientInfo": {"name": "acpgate", "version": "9"},
           "clientCapabilities": {"fs": {"readTextFile": True}, "terminal": False}}


def test_offer_by_setting() -> None:
    assert offer(V1_INIT, 1) is V1_INIT
    v2 = offer(V1_INIT, 2)
    validate_v2("InitializeRequest", v2)
    assert v2["protocolVersion"] == 2 and "clientCapabilities" not in v2
    auto = offer(V1_INIT, PROTOCOL_AUTO)
    validate_v2("InitializeRequest", auto)
    assert auto["clientCapabilities"] == V1_INIT["clientCapabilities"]  # for a v1 agent


def test_read_answer() -> None:
    version, v1 = read_answer({"protocolVersion": 2, "info": {"name": "a", "version": "1"},
                               "capabilities": {"session": {"prompt": {"image": {}},
                                                            "mcp": {"http": {}}}},
                               "authMethods": [{"methodId": "k", "type": "agent",
                                                "name": "K"}]}, PROTOCOL_AUTO)
    assert version == 2
    caps = v1["agentCapabilities"]
    assert caps["loadSession"] is True and caps["promptCapabilities"]["image"] is True
    assert caps["mcpCapabilities"]["http"] is True
    assert set(caps["sessionCapabilities"]) == {"list", "resume", "close"}
    assert v1["authMethods"] == [{"id": "k", "name": "K"}]
    assert v1["agentInfo"]["name"] == "a" and v1["v2"]["capabilities"]
    assert read_answer({"protocolVersion": 1}, PROTOCOL_AUTO) == (1, {"protocolVersion": 1})
    with pytest.raises(AgentSpeaksV1):
        read_answer({"protocolVersion": 1}, 2)


def test_requests_v1_to_v2() -> None:
    wire = AgentWire()
    method, params = wire.request("session/load", {"sessionId": "s", "cwd": "/w",
                                                   "mcpServers": [{"name": "m",
                                                                   "command": "x",
                                                                   "args": [], "env": []}]})
    assert method == "session/resume"
    validate_v2("ResumeSessionRequest", params)
    assert params["replayFrom"] == {"type": "start"}
    assert params["mcpServers"][0]["type"] == "stdio"
    wire.result("session/new", {}, {"sessionId": "s", "configOptions": [{
        "configId": "approval", "name": "Mode", "category": "mode", "type": "select",
        "currentValue": "ask", "options": [{"value": "ask", "name": "Ask"}]}]})
    method, params = wire.request("session/set_mode", {"sessionId": "s", "modeId": "ask"})
    assert method == "session/set_config_option"
    validate_v2("SetSessionConfigOptionRequest", params)
    assert params["configId"] == "approval"
    assert wire.request("authenticate", {"methodId": "k"}) == ("auth/login", {"methodId": "k"})


def _update(update: dict[str, object]) -> dict[str, object]:
    return {"sessionId": "s", "update": update}


def test_turn_and_upserts() -> None:
    wire = AgentWire()
    wire.prompt_sent("s")
    assert wire.update(_update({"sessionUpdate": "state_update", "state": "running"})) \
        == ([], None)
    assert wire.update(_update({"sessionUpdate": "user_message_chunk", "messageId": "u",
                                "content": {"type": "text", "text": "hi"}}))[0] == []
    created, _ = wire.update(_update({"sessionUpdate": "tool_call_update", "toolCallId": "t",
                                      "kind": None}))
    assert created[0]["update"] == {"sessionUpdate": "tool_call", "toolCallId": "t",
                                    "title": "t"}
    chunk = {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t",
             "content": {"type": "diff", "changes": [{"operation": "add", "path": "/a"}],
                         "patch": {"format": "git_patch", "text": "+x"}}}
    folded, _ = wire.update(_update(chunk))
    content = folded[0]["update"]["content"]
    assert folded[0]["update"]["sessionUpdate"] == "tool_call_update"
    assert content[0]["content"] == {"type": "text", "text": "+x"}
    plan, _ = wire.update(_update({"sessionUpdate": "plan_update", "plan": {
        "type": "items", "planId": "p", "entries": []}}))
    assert plan[0]["update"] == {"sessionUpdate": "plan", "entries": []}
    out, end = wire.update(_update({"sessionUpdate": "state_update", "state": "idle",
                                    "stopReason": "end_turn", "usage": {"totalTokens": 1}}))
    assert out == [] and end is not None
    assert end.result == {"stopReason": "end_turn", "usage": {"totalTokens": 1}}
    # Outside a prompt, a state change passes and a repeated snapshot does not.
    assert wire.update(_update({"sessionUpdate": "state_update", "state": "idle"}))[0] == []
    assert len(wire.update(_update({"sessionUpdate": "state_update",
                                    "state": "running"}))[0]) == 1


def test_failed_turn_and_permission() -> None:
    wire = AgentWire()
    wire.prompt_sent("s")
    _, end = wire.update(_update({"sessionUpdate": "state_update", "state": "idle",
                                  "stopReason": "error",
                                  "error": {"code": -32099, "message": "no"}}))
    assert end is not None and end.error == {"code": -32099, "message": "no"}
    asked = wire.agent_request("session/request_permission", {
        "sessionId": "s", "title": "Run", "options": [],
        "subject": {"type": "tool_call", "toolCall": {"toolCallId": "t"}}})
    assert asked["toolCall"] == {"toolCallId": "t", "title": "Run"} and "subject" not in asked
