"""The pure v1 → v2 translation (services/common/acp/v2), each piece alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.common.acp.v2.client_wire import SWEEP_FLOOR, ClientWire
from services.common.acp.v2.config import config_options_v2, mode_option
from services.common.acp.v2.handshake import (
    NoVersionFits,
    negotiate,
    v2_auth_methods,
    v2_initialize_result,
)
from services.common.acp.v2.requests import BadV2Params, mcp_servers_v1, permission_request_v2
from services.common.acp.v2.updates import SessionTranslator
from tests.v2schema import validate_v2

MODES = {"currentModeId": "ask", "availableModes": [
    {"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code", "description": "edits"}]}


def _valid(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for update in updates:
        validate_v2("SessionUpdate", update)
    return updates


def test_negotiation() -> None:
    assert [negotiate(v) for v in (1, 2, 3, "2", None, True)] == [1, 2, 2, 1, 1, 1]
    with pytest.raises(NoVersionFits) as caught:
        negotiate(0)
    assert caught.value.data == {"requested": 0, "supported": [1, 2]}


def test_initialize_result_v2_shape() -> None:
    v1 = {"protocolVersion": 1, "agentInfo": {"name": "acpgate", "version": "9"},
          "agentCapabilities": {"loadSession": True,
                                "promptCapabilities": {"image": True, "audio": False},
                                "mcpCapabilities": {"http": True, "sse": True},
                                "sessionCapabilities": {"resume": {}, "delete": {},
                                                        "fork": {}}},
          "authMethods": [{"id": "login", "name": "Log in"}], "_meta": {"zeroclaw": {}}}
    out = v2_initialize_result(v1, version=2, markers={"delete", "additionalDirectories"},
                               under_meta={"fork", "attach"})
    validate_v2("InitializeResponse", out)
    session = out["capabilities"]["session"]
    assert session["prompt"] == {"image": {}, "embeddedContext": {}}
    assert session["mcp"] == {"stdio": {}, "http": {}} and session["delete"] == {}
    assert session["_meta"] == {"acpgate": {"fork": {}}} and "additionalDirectories" not in session
    assert out["authMethods"] == [{"methodId": "login", "name": "Log in", "type": "agent"}]
    assert out["capabilities"]["auth"] == {}


def test_auth_methods_keep_their_type() -> None:
    assert v2_auth_methods([{"id": "k", "name": "Key", "type": "env_var", "vars": []}, 3,
                            {"name": "no id"}]) == [
        {"methodId": "k", "name": "Key", "type": "env_var", "vars": []}]


def test_modes_become_a_mode_option() -> None:
    option = mode_option(MODES)
    assert option is not None
    validate_v2("SessionConfigOption", option)
    assert option["category"] == "mode" and option["currentValue"] == "ask"
    v1_option = {"id": "model", "name": "Model", "type": "select", "currentValue": "a",
                 "options": [{"value": "a", "name": "A"}]}
    both = config_options_v2([v1_option], MODES)
    assert [o["configId"] for o in both] == ["mode", "model"] and "id" not in both[1]


def test_chunks_get_message_ids_per_message() -> None:
    tr = SessionTranslator()
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}}
    first, second = tr.translate(chunk)[0], tr.translate(chunk)[0]
    thought = tr.translate({**chunk, "sessionUpdate": "agent_thought_chunk"})[0]
    third = tr.translate(chunk)[0]
    _valid([first, second, thought, third])
    assert first["messageId"] == second["messageId"] != thought["messageId"]
    assert third["messageId"] != first["messageId"]
    given = {**chunk, "messageId": "m-1"}
    assert tr.translate(given) == [given]


def test_tool_calls_plans_and_diffs() -> None:
    tr = SessionTranslator()
    call = {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit", "kind": "edit",
            "status": "pending", "content": [{"type": "diff", "path": "/w/a.txt",
                                              "oldText": "x\n", "newText": "y\n"}]}
    (out,) = _valid(tr.translate(call))
    assert out["sessionUpdate"] == "tool_call_update" and out["toolCallId"] == "t1"
    diff = out["content"][0]
    assert diff["changes"] == [{"operation": "modify", "path": "/w/a.txt", "fileType": "text"}]
    assert "-x" in diff["patch"]["text"] and "+y" in diff["patch"]["text"]
    (plan,) = _valid(tr.translate({"sessionUpdate": "plan", "entries": [
        {"content": "do", "priority": "high", "status": "pending"}]}))
    assert plan["plan"]["type"] == "items" and plan["plan"]["planId"]


def test_mode_updates_are_config_option_updates() -> None:
    tr = SessionTranslator(modes=MODES)
    (out,) = _valid(tr.translate({"sessionUpdate": "current_mode_update",
                                  "currentModeId": "code"}))
    assert out["sessionUpdate"] == "config_option_update"
    assert out["configOptions"][0]["currentValue"] == "code"


def test_acpgate_kinds_become_lifecycle_or_prefixed() -> None:
    tr = SessionTranslator()
    got = _valid(tr.translate({"sessionUpdate": "prompt_received", "messageId": "m",
                               "prompt": [{"type": "text", "text": "hi"}]}))
    assert [(u["sessionUpdate"], u.get("state")) for u in got] == [
        ("state_update", "running"), ("user_message_chunk", None)]
    (idle,) = _valid(tr.translate({"sessionUpdate": "turn_complete", "stopReason": "end_turn",
                                   "usage": {"inputTokens": 1}}))
    assert idle["state"] == "idle" and idle["usage"] == {"inputTokens": 1}
    assert tr.translate({"sessionUpdate": "client_disconnected", "client": {}})[0][
        "sessionUpdate"] == "_acpgate_client_disconnected"
    assert tr.state("idle") == []  # no repeated state
    (error,) = _valid(tr.idle("end_turn", None, {"code": -32603, "message": "boom"}))
    assert error["stopReason"] == "error" and error["error"]["code"] == -32603


def test_permission_request_and_mcp_entries() -> None:
    out = permission_request_v2({"sessionId": "s", "toolCall": {"toolCallId": "t",
                                                               "title": "Run?"},
                                 "options": [{"optionId": "a", "name": "A",
                                              "kind": "allow_once"}]})
    validate_v2("RequestPermissionRequest", out)
    assert out["title"] == "Run?" and out["subject"]["toolCall"]["toolCallId"] == "t"
    assert mcp_servers_v1(None) == []
    assert mcp_servers_v1([{"type": "stdio", "name": "n", "command": "/x"}]) == [
        {"name": "n", "command": "/x"}]
    with pytest.raises(BadV2Params):
        mcp_servers_v1([{"name": "n", "command": "/x"}])


def test_wire_batches_and_permission_states() -> None:
    wire = ClientWire()
    feed, after = wire.inbound('[{"jsonrpc":"2.0","id":1,"method":"a"},'
                               '{"jsonrpc":"2.0","method":"n"},7]')
    assert len(feed) == 2 and after == []
    assert wire.outbound(['{"jsonrpc":"2.0","id":1,"result":{}}']) == [
        '[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}},'
        '{"jsonrpc":"2.0","id":1,"result":{}}]']
    assert wire.inbound("[]") == ([], [
        '{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}'])
    asked = wire.outbound([json.dumps({"jsonrpc": "2.0", "id": "zc-out-1",
                                       "method": "session/request_permission",
                                       "params": {"sessionId": "s", "options": [],
                                                  "toolCall": {"toolCallId": "t"}}})])
    assert [json.loads(x).get("method") for x in asked] == ["session/update",
                                                             "session/request_permission"]
    _, after = wire.inbound('{"jsonrpc":"2.0","id":"zc-out-1","result":{}}')
    assert json.loads(after[0])["params"]["update"]["state"] == "running"


def _chunk_line(sid: str, message_id: str, text: str, kind: str = "agent_message_chunk") -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": sid, "update": {"sessionUpdate": kind, "messageId": message_id,
                                     "content": {"type": "text", "text": text}}}},
                      separators=(",", ":"))


def test_a_run_of_message_chunks_passes_as_it_is() -> None:
    """The relay's common batch, one message's chunks, is handed on as the same list."""
    run = [_chunk_line("s", "msg_1", f"{i} ") for i in range(50)]
    assert ClientWire().outbound(run) is run


def test_a_mixed_batch_is_translated_as_line_by_line() -> None:
    """Lines that share the first line's start only in part, other sessions and messages,
    and updates to translate come out as each line alone would."""
    call = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "t1",
                                     "title": "Read", "status": "pending"}}},
                      separators=(",", ":"))
    batch = [_chunk_line("s", "msg_1", "a"), _chunk_line("s", "msg_1", '"update":{ b'),
             _chunk_line("s2", "msg_1", "c"), _chunk_line("s", "msg_2", "d"),
             _chunk_line("s", "msg_3", "e", "agent_thought_chunk"), call,
             _chunk_line("s", "msg_1", "f"), "not json", '{"jsonrpc":"2.0","id":3,"result":{}}']
    one_by_one = ClientWire()
    expected = [out for line in batch for out in one_by_one.outbound([line])]
    got = ClientWire().outbound(batch)
    assert got == expected
    assert json.loads(got[5])["params"]["update"]["sessionUpdate"] == "tool_call_update"
    assert got[:5] == batch[:5] and got[6:] == batch[6:]


def _asked(request_id: str, sid: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission",
                       "params": {"sessionId": sid, "options": [],
                                  "toolCall": {"toolCallId": "t"}}})


def _withdrawal(request_id: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "$/cancel_request",
                       "params": {"requestId": request_id}})


def _states(lines: list[str]) -> list[str]:
    return [json.loads(x)["params"]["update"]["state"] for x in lines
            if json.loads(x).get("method") == "session/update"]


def test_a_withdrawn_permission_request_is_forgotten() -> None:
    """acpgate withdrew it (no answer in time, another client answered): this client's
    answer would come to nothing, so nothing is kept for it; the session runs again once
    it waits on no other request."""
    wire = ClientWire()
    assert _states(wire.outbound([_asked("zc-out-1", "s"), _asked("zc-out-2", "s")])) == [
        "requires_action"]
    first = wire.outbound([_withdrawal("zc-out-1")])
    assert first == [_withdrawal("zc-out-1")]  # the other one still waits
    assert _states(wire.outbound([_withdrawal("zc-out-2")])) == ["running"]
    assert wire.held() == 1  # the translator of the live session, no request
    assert wire.inbound('{"jsonrpc":"2.0","id":"zc-out-2","result":{}}')[1] == []


def test_a_forgotten_session_keeps_nothing() -> None:
    wire = ClientWire()
    wire.outbound([_asked("zc-out-1", "s"), _chunk_line("s2", "msg_1", "x"),
                   _asked("zc-out-2", "s2")])
    wire.forget("s")
    assert set(wire.sessions) == {"s2"} and wire.held() == 2
    assert wire.inbound('{"jsonrpc":"2.0","id":"zc-out-1","result":{}}')[1] == []


def test_translators_of_sessions_no_longer_served_are_swept() -> None:
    """Two thousand sessions seen, one served at a time: the translators held stay within
    a small multiple of the live ones, whatever was not forgotten."""
    live = {"keeper"}
    wire = ClientWire(live.__contains__)
    wire.session("keeper").modes = MODES
    for i in range(2000):
        sid = f"s{i}"
        live.add(sid)
        wire.outbound([_chunk_line(sid, "msg_1", "x"),
                       json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                           "sessionId": sid, "update": {"sessionUpdate": "plan",
                                                        "entries": []}}})])
        live.discard(sid)
    assert len(wire.sessions) <= SWEEP_FLOOR
    assert wire.session("keeper").modes == MODES  # a live session's state is kept
