"""A hostile v2 agent naming fresh ids without end, against the translation it talks to.

The translation (:class:`~services.common.acp.v2.agent_wire.AgentWire`) lives as long as
the adapter and keeps state per id the agent chooses: its sessions (before acpgate's
session is bound any id passes), each session's tool calls, each tool call's content.
Each is bounded: a hundred thousand updates with fresh ids leave each map at its bound,
each drop is told (counted), and what is within the bounds still translates.
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.agent_wire import AgentWire
from services.common.acp.v2.names import (
    MAX_AGENT_SESSIONS,
    MAX_CALL_CONTENT_CHARS,
    MAX_CALL_CONTENT_CHUNKS,
    MAX_TOOL_CALLS_KEPT,
)
from services.common.protocol import DEFAULT_MAX_SUBAGENTS

_FLOOD = 100_000


def _wire() -> tuple[AgentWire, list[str]]:
    wire = AgentWire()
    drops: list[str] = []
    wire.on_drop = lambda what: drops.append(what)
    return wire, drops


def _update(sid: str, update: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"sessionId": sid, "update": update}]


def _chunk(call: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_content_chunk", "toolCallId": call,
            "content": {"type": "content", "content": {"type": "text", "text": text}}}


def test_fresh_session_ids_before_the_bind_hold_a_bounded_few() -> None:
    wire, drops = _wire()
    for n in range(_FLOOD):
        wire.update(_update(f"s{n}", {"sessionUpdate": "agent_message_chunk",
                                      "content": {"type": "text", "text": "x"}})[0])
        # each fresh session also announcing children of its own
        wire.update(_update(f"s{n}", {"sessionUpdate": "subagent_update",
                                      "sessionId": f"c{n}"})[0])
    assert len(wire._sessions) == MAX_AGENT_SESSIONS
    assert len(wire.children.all()) <= MAX_AGENT_SESSIONS * DEFAULT_MAX_SUBAGENTS
    assert drops.count("session") == 2 * (_FLOOD - MAX_AGENT_SESSIONS)
    # acpgate's own session set up and bound: the others' state is released.
    wire.result("session/new", {}, {"sessionId": "mine", "configOptions": []})
    wire.bind("mine", "edge-1")
    assert list(wire._sessions) == ["mine"]
    out, _ = wire.update(_update("mine", {"sessionUpdate": "agent_message_chunk",
                                          "content": {"type": "text", "text": "ok"}})[0])
    assert out and out[0]["update"]["content"]["text"] == "ok"


def test_fresh_tool_call_ids_are_bounded_per_session() -> None:
    wire, drops = _wire()
    wire.bind("s", "edge-1")
    for n in range(_FLOOD):
        wire.update(_update("s", {"sessionUpdate": "tool_call_update", "toolCallId": f"t{n}",
                                  "content": [{"type": "content", "content": {
                                      "type": "text", "text": "out"}}]})[0])
        wire.update(_update("s", _chunk(f"u{n}", "more"))[0])
    session = wire._sessions["s"]
    assert len(session.created) == MAX_TOOL_CALLS_KEPT
    assert len(session.calls) <= MAX_TOOL_CALLS_KEPT
    assert len(session.chars) <= MAX_TOOL_CALLS_KEPT
    assert drops.count("tool_call") == 2 * _FLOOD - MAX_TOOL_CALLS_KEPT
    # The newest calls are still known: a later update of one is no second tool_call.
    out, _ = wire.update(_update("s", {"sessionUpdate": "tool_call_update",
                                       "toolCallId": f"u{_FLOOD - 1}",
                                       "status": "completed"})[0])
    assert out[0]["update"]["sessionUpdate"] == "tool_call_update"


def test_content_chunks_of_one_tool_call_are_bounded() -> None:
    wire, drops = _wire()
    wire.bind("s", "edge-1")
    last: list[dict[str, Any]] = []
    for n in range(_FLOOD):
        last, _ = wire.update(_update("s", _chunk("t", f"line {n}"))[0])
    calls = wire._sessions["s"].calls
    assert len(calls["t"]) == MAX_CALL_CONTENT_CHUNKS
    assert drops == ["tool_call_content"] * (_FLOOD - MAX_CALL_CONTENT_CHUNKS)
    # Past the bound the chunk still goes (a v2 client's), v1's content as it was.
    update = last[0]["update"]
    assert "content" not in update
    assert update["_meta"]["acpgate"]["contentChunk"]["content"]["text"] == f"line {_FLOOD - 1}"
    # By size too: a few big chunks stop at the bound of characters.
    big = "x" * (MAX_CALL_CONTENT_CHARS // 4)
    for _ in range(8):
        wire.update(_update("s", _chunk("big", big))[0])
    assert sum(len(item["content"]["text"]) for item in calls["big"]) < MAX_CALL_CONTENT_CHARS
