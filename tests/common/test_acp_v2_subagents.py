"""A v2 agent's child sessions and background lists in the pure translation
(services/common/acp/v2/subagents, agent_wire, updates) and the edge's note of them
(services/edge/sessions/subagents)."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from typing import Any

from services.common.acp.v2.agent_wire import AgentWire
from services.common.acp.v2.child_cards import is_card
from services.common.acp.v2.client_wire import ClientWire
from services.common.acp.v2.subagents import Children, acpgate_made, child_id, unwrap
from services.common.acp.v2.updates import SessionTranslator
from services.common.turn_items import (
    ROLE_ASSISTANT,
    ROLE_THOUGHT,
    ROLE_TOOL_CALL,
    ROLE_TOOL_RESULT,
    ROLE_USER,
    TurnAccumulator,
)
from services.edge.sessions.subagents import SessionWork


def _wire() -> AgentWire:
    wire = AgentWire()
    ids = itertools.count(1)
    wire.children = Children(mint=lambda parent, raw: f"acp-{next(ids)}")
    wire.bind("p", "EDGE")
    return wire


def _one(wire: AgentWire, sid: str, update: dict[str, Any]) -> dict[str, Any] | None:
    out, end = wire.update({"sessionId": sid, "update": update})
    assert end is None
    out = [p for p in out if not is_card(p["update"])]  # the cards: their own test
    assert len(out) <= 1
    if not out:
        return None
    assert out[0]["sessionId"] == "p"  # always the top session's stream
    got: dict[str, Any] = out[0]["update"]
    return got


def test_children_get_acpgate_ids_and_ride_on_the_parent() -> None:
    wire = _wire()
    announced = _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                                 "title": "T"})
    assert announced == {"sessionUpdate": "subagent_update", "sessionId": "acp-1",
                         "title": "T", "_meta": {"acpgate": {"subagent": {
                             "sessionId": "acp-1"}}}}
    # A patch of the same child keeps its id.
    assert _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "c"})[
        "sessionId"] == "acp-1"
    text = _one(wire, "c", {"sessionUpdate": "agent_message_chunk", "messageId": "m",
                            "content": {"type": "text", "text": "hi"}})
    assert text is not None and text["sessionUpdate"] == "agent_thought_chunk"
    assert text["_meta"]["acpgate"]["subagent"] == {"sessionId": "acp-1",
                                                    "sessionUpdate": "agent_message_chunk"}
    assert unwrap(text) == ("acp-1", {"sessionUpdate": "agent_message_chunk",
                                      "messageId": "m",
                                      "content": {"type": "text", "text": "hi"}})
    other = _one(wire, "c", {"sessionUpdate": "tool_call_update", "toolCallId": "t"})
    assert other == {"sessionUpdate": "subagent_session_update", "sessionId": "acp-1",
                     "update": {"sessionUpdate": "tool_call_update", "toolCallId": "t"},
                     "_meta": {"acpgate": {"subagent": {"sessionId": "acp-1"}}}}
    stamped = {**other, "_meta": {"acpgate": {**other["_meta"]["acpgate"], "eventId": 7}}}
    assert unwrap(stamped) == ("acp-1", {"sessionUpdate": "tool_call_update",
                                         "toolCallId": "t",
                                         "_meta": {"acpgate": {"eventId": 7}}})
    # A grandchild is announced on its parent's session.
    grand = _one(wire, "c", {"sessionUpdate": "subagent_update", "sessionId": "g"})
    assert grand is not None and unwrap(grand) == ("acp-1", grand)
    assert grand["_meta"]["acpgate"]["subagent"] == {"sessionId": "acp-2",
                                                     "parentSessionId": "acp-1"}
    # The parent's own updates are no child's, nor is acpgate's kind without its mark
    # (what an agent would have to send: its _meta.acpgate never gets this far).
    assert unwrap({"sessionUpdate": "agent_thought_chunk", "content": {}}) is None
    forged = {"sessionUpdate": "subagent_session_update", "sessionId": "victim",
              "update": {"sessionUpdate": "agent_message_chunk"}}
    assert unwrap(forged) is None
    assert unwrap({**forged, "_meta": {"acpgate": {"subagent": {"sessionId": "acp-1"}}}}) \
        is None
    assert wire.update({"sessionId": "p", "update": forged}) == ([], None)


def test_ids_the_agent_names_are_mapped_or_left_out() -> None:
    wire = _wire()
    _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "c"})
    message = _one(wire, "p", {"sessionUpdate": "session_message", "messageId": "m",
                               "senderSessionId": "p", "recipientSessionId": "c"})
    ours = {"acpgate": {"subagent": {"sessionIds": "acpgate"}}}
    assert message == {"sessionUpdate": "session_message", "messageId": "m",
                       "senderSessionId": "EDGE", "recipientSessionId": "acp-1",
                       "_meta": ours}
    assert message is not None and acpgate_made(message)
    assert not acpgate_made({"sessionUpdate": "session_message", "messageId": "m",
                             "recipientSessionId": "victim"})
    assert not acpgate_made({"sessionUpdate": "subagent_update", "sessionId": "victim"})
    stray = _one(wire, "p", {"sessionUpdate": "session_message_chunk", "messageId": "m",
                             "senderSessionId": "elsewhere", "recipientSessionId": "p"})
    assert stray == {"sessionUpdate": "session_message_chunk", "messageId": "m",
                     "recipientSessionId": "EDGE", "_meta": ours}
    # An update on a session the agent never announced is no session's: dropped.
    assert wire.update({"sessionId": "ghost", "update": {
        "sessionUpdate": "agent_message_chunk", "messageId": "g",
        "content": {"type": "text", "text": "boo"}}}) == ([], None)
    # A session is never a child of its own, nor moved under another tree.
    assert _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "p"}) is None
    wire.bind("q", "EDGE2")
    wire.update({"sessionId": "q", "update": {"sessionUpdate": "subagent_update",
                                              "sessionId": "d"}})
    out, _ = wire.update({"sessionId": "q", "update": {"sessionUpdate": "subagent_update",
                                                        "sessionId": "c"}})
    assert out == []


def test_background_lists_pass_and_are_repeated() -> None:
    wire = _wire()
    _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "c"})
    wire.prompt_sent("p")
    items = [{"type": "tool_call", "toolCallId": "t"}, {"type": "_sub", "sessionId": "c"},
             {"type": "_sub", "sessionId": "unknown"}]
    mapped = [{"type": "tool_call", "toolCallId": "t"}, {"type": "_sub", "sessionId": "acp-1"}]
    # While a prompt runs, its states are acpgate's: a new list passes as running.
    assert _one(wire, "p", {"sessionUpdate": "state_update", "state": "running",
                            "background": items}) == {
        "sessionUpdate": "state_update", "state": "running", "background": mapped}
    assert _one(wire, "p", {"sessionUpdate": "state_update", "state": "running",
                            "background": items}) is None
    out, end = wire.update({"sessionId": "p", "update": {
        "sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn",
        "background": items}})
    assert out == [] and end is not None and end.result == {"stopReason": "end_turn"}
    # Outside a prompt, a changed list passes even when the state is the same.
    emptied = _one(wire, "p", {"sessionUpdate": "state_update", "state": "idle",
                               "background": []})
    assert emptied == {"sessionUpdate": "state_update", "state": "idle", "background": []}

    translator = SessionTranslator()
    assert translator.translate({"sessionUpdate": "state_update", "state": "running",
                                 "background": mapped})[0]["background"] == mapped
    idle = translator.translate({"sessionUpdate": "turn_complete", "stopReason": "end_turn"})
    assert idle == [{"sessionUpdate": "state_update", "state": "idle",
                     "stopReason": "end_turn", "background": mapped}]
    assert translator.snapshot()["background"] == mapped


def test_session_work_is_alive_while_background_or_children_run() -> None:
    async def run() -> None:
        work = SessionWork()
        assert not work.alive
        mark = {"acpgate": {"subagent": {"sessionId": "a"}}}
        # Unmarked (an agent's own, through a v1 relay): no child of acpgate's.
        assert work.observe([{"sessionUpdate": "subagent_update", "sessionId": "a",
                              "state": {"state": "running"}}]) == []
        assert not work.alive
        announced = work.observe([{"sessionUpdate": "subagent_update", "sessionId": "a",
                                   "state": {"state": "running"}, "_meta": mark},
                                  "text chunk"])
        assert [u["sessionId"] for u in announced] == ["a"] and work.alive
        assert work.children == {"a": ""}
        quiet = asyncio.ensure_future(work.quiet())
        work.observe([{"sessionUpdate": "state_update", "state": "idle",
                       "background": [{"type": "terminal", "terminalId": "x"}]}])
        work.observe([{"sessionUpdate": "subagent_session_update", "sessionId": "a",
                       "update": {"sessionUpdate": "state_update", "state": "idle"},
                       "_meta": mark}])
        await asyncio.sleep(0)
        assert work.alive and not quiet.done()
        work.observe([{"sessionUpdate": "state_update", "state": "idle", "background": []}])
        await asyncio.wait_for(quiet, 5)
        assert not work.alive
        assert work.observe([{"sessionUpdate": "subagent_update", "sessionId": "a",
                              "_meta": mark}]) == []
    asyncio.run(run())


def test_child_ids_are_acpgates_and_stable_per_parent() -> None:
    """The same child of the same parent is the same session (announced again after a
    restore); another parent's, or another child, another; never an id the agent chose,
    never a random (v4) session id's shape."""
    first = child_id("EDGE", "c")
    assert first == child_id("EDGE", "c") != child_id("EDGE", "d") != child_id("OTHER", "c")
    assert uuid.UUID(first).version == 5 and first not in ("c", "EDGE")
    wire = AgentWire()
    wire.bind("p", "EDGE")
    out, _ = wire.update({"sessionId": "p", "update": {"sessionUpdate": "subagent_update",
                                                        "sessionId": "c"}})
    assert out[0]["update"]["sessionId"] == first


def test_children_of_one_top_session_are_bounded() -> None:
    """Past the bound (grandchildren counted with the top session's children) a child is
    not taken: its announcement and its updates are dropped, the caller told once; a
    child taken before still works, and another top session has a bound of its own."""
    wire = _wire()
    wire.bind("q", "EDGE-Q")
    full: list[str] = []
    wire.children.limit = 2
    wire.children.on_limit = full.append
    assert _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "c1"})
    assert _one(wire, "c1", {"sessionUpdate": "subagent_update", "sessionId": "g1"})
    for raw in ("c2", "c3"):
        assert _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": raw}) is None
        assert _one(wire, raw, {"sessionUpdate": "agent_message_chunk", "messageId": "m",
                                "content": {"type": "text", "text": "x"}}) is None
    assert full == ["p"]
    assert [c.raw for c in wire.children.all()] == ["c1", "g1"]
    assert _one(wire, "p", {"sessionUpdate": "subagent_update", "sessionId": "c1",
                            "state": {"state": "idle"}}) is not None
    out, _ = wire.update({"sessionId": "q", "update": {"sessionUpdate": "subagent_update",
                                                       "sessionId": "d1"}})
    assert out and out[0]["update"]["sessionId"] == "acp-3"


def test_v1_clients_get_a_card_per_child() -> None:
    """Each child gets a tool-call card on its parent: created when announced (its title,
    kind think, in progress), retitled, completed with its answer's text when idle (failed
    on an error), in progress again when it runs again; a v2 client never gets one."""
    wire = _wire()

    def cards(sid: str, update: dict[str, Any]) -> list[dict[str, Any]]:
        out, _ = wire.update({"sessionId": sid, "update": update})
        assert all(p["sessionId"] == "p" for p in out)
        return [p["update"] for p in out if is_card(p["update"])]

    mark = {"acpgate": {"subagent": {"sessionId": "acp-1", "card": True}}}
    assert cards("p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                       "state": {"state": "running"}}) == [
        {"sessionUpdate": "tool_call", "toolCallId": "acpgate-subagent-acp-1",
         "title": "Subagent", "kind": "think", "status": "in_progress", "_meta": mark}]
    assert cards("p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                       "title": "Helper"}) == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "acpgate-subagent-acp-1",
         "title": "Helper", "_meta": mark}]
    for text, kind in (("thinking", "agent_thought_chunk"), ("ans", "agent_message_chunk"),
                       ("wer", "agent_message_chunk")):
        assert cards("c", {"sessionUpdate": kind, "messageId": "m",
                           "content": {"type": "text", "text": text}}) == []
    done = cards("p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                       "state": {"state": "idle", "stopReason": "end_turn"}})
    assert done == [{"sessionUpdate": "tool_call_update",
                     "toolCallId": "acpgate-subagent-acp-1", "status": "completed",
                     "content": [{"type": "content",
                                  "content": {"type": "text", "text": "answer"}}],
                     "_meta": mark}]
    assert cards("p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                       "state": {"state": "idle"}}) == []  # no change: no update
    assert [c["status"] for c in cards("p", {"sessionUpdate": "subagent_update",
                                             "sessionId": "c",
                                             "state": {"state": "running"}})] == ["in_progress"]
    failed = cards("p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                         "state": {"state": "idle", "stopReason": "error"}})
    assert failed[0]["status"] == "failed" and failed[0]["content"][0]["content"]["text"] == ""
    # A v2 client gets the child's own session instead: the card is left out.
    client = ClientWire()
    line = json.dumps({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": "EDGE", "update": done[0]}})
    assert client.outbound([line]) == []


def test_a_childs_text_is_not_stored_as_the_parents_thinking() -> None:
    """The parent's turn history holds its own thoughts and answer, and the child as its
    card — a tool call whose result is the child's answer — never the child's text as
    thoughts of the parent."""
    wire = _wire()
    acc = TurnAccumulator(user_text="go")
    for sid, update in (
            ("p", {"sessionUpdate": "agent_thought_chunk", "messageId": "t",
                   "content": {"type": "text", "text": "mine"}}),
            ("p", {"sessionUpdate": "subagent_update", "sessionId": "c", "title": "Helper",
                   "state": {"state": "running"}}),
            ("c", {"sessionUpdate": "agent_thought_chunk", "messageId": "ct",
                   "content": {"type": "text", "text": "child thinks"}}),
            ("c", {"sessionUpdate": "agent_message_chunk", "messageId": "cm",
                   "content": {"type": "text", "text": "child says"}}),
            ("p", {"sessionUpdate": "subagent_update", "sessionId": "c",
                   "state": {"state": "idle", "stopReason": "end_turn"}}),
            ("p", {"sessionUpdate": "agent_message_chunk", "messageId": "m",
                   "content": {"type": "text", "text": "done"}})):
        out, _ = wire.update({"sessionId": sid, "update": update})
        acc.add_many([p["update"] for p in out])
    items = [(i.role, i.text or i.output, i.title) for i in acc.items]
    assert items == [
        (ROLE_USER, "go", ""),
        (ROLE_THOUGHT, "mine", ""),
        (ROLE_TOOL_CALL, "", "Helper"),
        (ROLE_TOOL_RESULT, "child says", "Helper"),
        (ROLE_ASSISTANT, "done", ""),
    ], items
