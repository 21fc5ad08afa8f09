"""The pure translation toward a v2 agent (services/common/acp/v2/agent_init, agent_wire)."""

from __future__ import annotations

import pytest

from services.common.acp.v2.agent_init import AgentSpeaksV1, offer, read_answer
from services.common.acp.v2.agent_wire import AgentWire
from services.common.acp.v2.handshake import v2_initialize_result
from services.common.acp.v2.names import PROTOCOL_AUTO
from services.common.acp.v2.requests import permission_request_v2
from services.common.acp.v2.updates import SessionTranslator
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


def test_the_v1_reading_keeps_what_v1_can_say() -> None:
    """What the real adapters answer a v2 offer (claude-agent-acp 0.101, codex-acp 2.6):
    every capability v1 has a name for is kept in the v1 reading."""
    _, claude = read_answer({"protocolVersion": 2, "info": {"name": "c", "version": "1"},
                             "capabilities": {
                                 "session": {"prompt": {"image": {}}, "mcp": {"http": {}},
                                             "delete": {}, "fork": {},
                                             "systemPrompt": {"mode": {"override": {}}}},
                                 "providers": {}, "_meta": {"claudeCode": {}}},
                             "authMethods": []}, PROTOCOL_AUTO)
    caps = claude["agentCapabilities"]
    assert caps["providers"] == {} and "auth" not in caps
    assert caps["sessionCapabilities"]["systemPrompt"] == {"mode": {"override": {}}}
    assert set(caps["sessionCapabilities"]) == {"list", "resume", "close", "delete", "fork",
                                                "systemPrompt"}
    _, codex = read_answer({"protocolVersion": 2, "info": {"name": "x", "version": "2"},
                            "capabilities": {"auth": {"_meta": {"authStatus": {}}},
                                             "providers": {},
                                             "session": {"title": {}, "systemPrompt": {}}},
                            "authMethods": [{"methodId": "api-key", "type": "agent",
                                             "name": "API Key"}]}, PROTOCOL_AUTO)
    caps = codex["agentCapabilities"]
    assert caps["auth"] == {"_meta": {"authStatus": {}}, "logout": {}}
    assert caps["sessionCapabilities"]["title"] == {} and caps["providers"] == {}


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
    assert plan[0]["update"] == {"sessionUpdate": "plan", "entries": [], "_meta": {
        "acpgate": {"plan": {"type": "items", "planId": "p", "entries": []}}}}
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


def test_a_v2_client_gets_the_agents_own_forms_back() -> None:
    """What v1 cannot carry as it came (a notice, a plan's id, a content chunk, a v2 diff)
    is kept under ``_meta.acpgate`` on the way in and given back to a v2 client as the
    agent sent it, acpgate's event id kept."""
    wire = AgentWire()
    translator = SessionTranslator()

    def there_and_back(update: dict[str, object]) -> list[dict[str, object]]:
        out, _ = wire.update(_update(update))
        stamped = [{**u["update"], "_meta": {**u["update"].get("_meta", {}), "acpgate": {
            **u["update"].get("_meta", {}).get("acpgate", {}), "eventId": 3}}} for u in out]
        return [v for u in stamped for v in translator.translate(u)]

    def without_event_id(update: dict[str, object]) -> dict[str, object]:
        meta = dict(update["_meta"])  # type: ignore[arg-type]
        assert meta.pop("acpgate") == {"eventId": 3}
        return {**{k: v for k, v in update.items() if k != "_meta"},
                **({"_meta": meta} if meta else {})}

    notice = {"sessionUpdate": "notice", "severity": "info", "title": "T",
              "description": "d", "_meta": {"vendor": 1}}
    plan = {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p7",
                                                     "entries": []}}
    diff = {"type": "diff", "changes": [{"operation": "add", "path": "/a"}],
            "patch": {"format": "git_patch", "text": "+x"}}
    call = {"sessionUpdate": "tool_call_update", "toolCallId": "t", "title": "Edit",
            "content": [diff]}
    chunk = {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t",
             "content": {"type": "content", "content": {"type": "text", "text": "more"}}}
    created = there_and_back(call)
    assert [without_event_id(u) for u in created] == [call], created
    for sent in (notice, plan, chunk):
        got = there_and_back(sent)
        assert [without_event_id(u) for u in got] == [sent], got
    for update in (*there_and_back(notice), *there_and_back(plan), *created):
        validate_v2("SessionUpdate", update)


def test_what_a_v2_client_gets_back_of_a_v2_agent() -> None:
    """Kept through acpgate's v1 inside: a permission request's own title and description,
    the idle's ``_meta``, the auth ``_meta`` and ``providers`` of initialize."""
    wire = AgentWire()
    asked = wire.agent_request("session/request_permission", {
        "sessionId": "s", "title": "Run command?", "description": "why",
        "subject": {"type": "tool_call", "toolCall": {"toolCallId": "t", "title": "echo"}},
        "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]})
    assert asked["toolCall"]["title"] == "echo" and "description" not in asked
    back = permission_request_v2(asked)
    validate_v2("RequestPermissionRequest", back)
    assert (back["title"], back["description"]) == ("Run command?", "why")
    assert "_meta" not in back
    idle = SessionTranslator().idle("end_turn", {"stopReason": "end_turn",
                                                 "_meta": {"quota": {"n": 1}}})
    assert idle[-1]["_meta"] == {"quota": {"n": 1}}
    _, v1 = read_answer({"protocolVersion": 2, "info": {"name": "x", "version": "2"},
                         "capabilities": {"auth": {"_meta": {"authStatus": {}}},
                                          "providers": {}, "session": {}},
                         "authMethods": []}, PROTOCOL_AUTO)
    init = v2_initialize_result(v1, version=2, markers=frozenset(), under_meta=frozenset())
    validate_v2("InitializeResponse", init)
    assert init["capabilities"]["auth"] == {"_meta": {"authStatus": {}}}
    assert init["capabilities"]["providers"] == {}
