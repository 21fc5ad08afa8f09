"""Turn accumulation → HistoryItems, and stored items → replay / agent history (SPEC §5, §8)."""

from __future__ import annotations

import json

from acpgate_contracts.session.v1 import session_pb2
from services.common.turn_items import finished_calls
from services.edge.sessions.history_wire import history_meta, replay_updates, transcript
from services.edge.sessions.turn import TEXT_BLOCK_CHUNKS, TurnAccumulator

Role = session_pb2.HistoryItem.Role


def _chunk(kind: str, text: str) -> dict:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def _turn() -> TurnAccumulator:
    acc = TurnAccumulator(user_text="do it")
    acc.add(_chunk("agent_thought_chunk", "thinking "))
    acc.add(_chunk("agent_thought_chunk", "hard"))
    acc.add(_chunk("agent_message_chunk", "Running "))
    acc.add(_chunk("agent_message_chunk", "it."))
    acc.add({"sessionUpdate": "tool_call", "toolCallId": "t1", "name": "shell", "title": "shell",
             "kind": "execute", "status": "pending", "rawInput": {"command": "ls"}})
    acc.add({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"})
    acc.add({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
             "rawOutput": "a\nb", "name": "shell"})
    acc.add({"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "low",
                                                   "status": "pending"}]})
    acc.add(_chunk("agent_message_chunk", "Done."))
    return acc


def test_accumulator_items_in_order() -> None:
    acc = _turn()
    roles = [i.role for i in acc.items]
    assert roles == [Role.ROLE_USER, Role.ROLE_THOUGHT, Role.ROLE_ASSISTANT, Role.ROLE_TOOL_CALL,
                     Role.ROLE_TOOL_RESULT, Role.ROLE_ASSISTANT]
    assert acc.items[1].text == "thinking hard" and acc.items[2].text == "Running it."
    call, result = acc.items[3], acc.items[4]
    assert (call.tool_call_id, call.tool_name, call.tool_kind) == ("t1", "shell", "execute")
    assert json.loads(call.arguments_json) == {"command": "ls"}
    assert (result.output, result.status, result.tool_call_id) == ("a\nb", "completed", "t1")
    assert acc.text == "Running it.Done."
    assert acc.plan_json is not None and json.loads(acc.plan_json)[0]["content"] == "x"


def test_replay_updates_shapes() -> None:
    ups = replay_updates(_turn().items)
    assert [u["sessionUpdate"] for u in ups] == [
        "user_message_chunk", "agent_thought_chunk", "agent_message_chunk", "tool_call",
        "tool_call_update", "agent_message_chunk"]
    assert ups[3] == {"sessionUpdate": "tool_call", "toolCallId": "t1", "name": "shell",
                      "title": "shell", "kind": "execute", "status": "completed",
                      "rawInput": {"command": "ls"}}
    assert ups[4] == {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                      "status": "completed", "name": "shell", "title": "shell", "kind": "execute",
                      "rawOutput": "a\nb", "body": "a\nb",
                      "content": [{"type": "content", "content": {"type": "text", "text": "a\nb"}}]}


def test_history_meta_and_transcript() -> None:
    items = _turn().items
    meta = history_meta(items)
    assert meta[0] == {"role": "user", "text": "do it"}
    assert meta[3] == {"role": "tool_call", "toolCallId": "t1", "toolName": "shell",
                       "toolKind": "execute", "title": "shell", "arguments": {"command": "ls"}}
    assert meta[4]["role"] == "tool_result" and meta[4]["output"] == "a\nb"
    text = transcript(items)
    assert text.startswith("User: do it") and "Assistant: Done." in text


def test_many_chunks_join_in_order() -> None:
    acc = TurnAccumulator(user_text="u")
    for i in range(20_000):
        acc.add(_chunk("agent_message_chunk", f"{i} "))
    expected = "".join(f"{i} " for i in range(20_000))
    assert acc.text == expected
    assert [i.text for i in acc.items] == ["u", expected]


def test_a_long_turn_holds_its_text_in_blocks() -> None:
    """The accumulated text is bounded: never more than TEXT_BLOCK_CHUNKS loose chunk strings."""
    acc = TurnAccumulator(user_text="u")
    chunks = [f"{i}:{'x' * (i % 7)} " for i in range(10 * TEXT_BLOCK_CHUNKS + 3)]
    for n, text in enumerate(chunks):
        acc.add(_chunk("agent_message_chunk" if n < 900 else "agent_thought_chunk", text))
    runs = acc._entries[1:]
    assert len(runs) == 2  # one assistant run, one thought run
    for run in runs:
        assert len(run.parts) < TEXT_BLOCK_CHUNKS  # type: ignore[union-attr]
    assert acc.text == "".join(chunks[:900])
    assert [i.text for i in acc.items] == ["u", "".join(chunks[:900]), "".join(chunks[900:])]
    burst = TurnAccumulator(user_text="u")  # the relay's path: a burst of text chunks
    assert burst.add_many(chunks) == []
    assert len(burst._entries[1].parts) < TEXT_BLOCK_CHUNKS  # type: ignore[union-attr]
    assert burst.text == "".join(chunks)


def test_odd_external_tool_shapes_are_normalised() -> None:
    acc = TurnAccumulator(user_text="u")
    acc.add({"sessionUpdate": "tool_call", "rawInput": "just a string", "content": {"not": "list"}})
    acc.add({"sessionUpdate": "tool_call", "toolCallId": "x", "title": "T", "rawInput": [1, 2]})
    acc.add({"sessionUpdate": "tool_call_update", "toolCallId": "x", "status": "completed",
             "rawOutput": {"ok": True}})
    acc.add({"sessionUpdate": "tool_call_update", "status": "completed"})  # no id: ignored
    call1, call2, result = acc.items[1:]
    assert call1.tool_call_id == "call-1" and call1.tool_name == "tool" and call1.content_json == ""
    assert json.loads(call1.arguments_json) == {"value": "just a string"}
    assert call2.tool_name == "T" and json.loads(call2.arguments_json) == {"value": [1, 2]}
    assert result.tool_call_id == "x" and json.loads(result.output) == {"ok": True}


def test_replay_page_by_page_is_the_whole_replay() -> None:
    """A tool result on a later page than its call still gets the call's name and kind."""
    from services.edge.sessions.history_wire import Replay

    items = _turn().items
    for cut in range(1, len(items)):
        replay = Replay()
        assert replay.updates(items[:cut]) + replay.updates(items[cut:]) == replay_updates(items)


def test_carry_over_keeps_the_newest_part_within_its_cap() -> None:
    """The transcript an external adapter gets is bounded: the oldest lines go first, a
    single longer line keeps its end, and a note says what was left out."""
    from services.edge.sessions.history_wire import CarryOver

    def user(text: str) -> session_pb2.HistoryItem:
        return session_pb2.HistoryItem(role=Role.ROLE_USER, text=text)

    small = CarryOver(max_chars=1_000)
    small.add([user("hello")])
    assert small.text() == "User: hello"
    assert CarryOver().text() is None

    carry = CarryOver(max_chars=1_000)
    for page in range(10):
        carry.add([user(f"{page}-{n} " + "w" * 90) for n in range(5)])
    text = carry.text()
    assert text is not None
    note, _, body = text.partition("\n\n")
    assert note.startswith("[acpgate: this conversation is longer than the 1000 characters")
    assert len(body) <= 1_000 and body.endswith("w" * 90)
    assert "User: 9-4 " in body and "User: 0-0 " not in body
    dropped = int(note.split("oldest ")[1].split(" ")[0])
    assert dropped + len(body) == len("\n\n".join(
        f"User: {p}-{n} " + "w" * 90 for p in range(10) for n in range(5)))

    huge = CarryOver(max_chars=100)
    huge.add([user("a" * 50 + "b" * 500)])
    assert (huge.text() or "").endswith("\n\n" + "b" * 100)


def test_model_output_is_stored_beside_the_human_summary() -> None:
    """deliver_file (SPEC §10): the client's summary is `output`, the JSON the model saw
    (`_meta.acpgate.modelOutput`) is the result's `text`; replay shows the summary, the
    agent's seed gets the JSON back."""
    model_view = json.dumps({"delivered": True, "uri": "attachment://deliver/ab.pdf"})
    acc = TurnAccumulator(user_text="deliver it")
    acc.add({"sessionUpdate": "tool_call", "toolCallId": "d1", "name": "deliver_file",
             "title": "deliver_file", "kind": "other", "status": "pending",
             "rawInput": {"path": "a.pdf"}})
    acc.add({"sessionUpdate": "tool_call_update", "toolCallId": "d1", "status": "completed",
             "name": "deliver_file", "title": "a.pdf", "rawOutput": "Delivered a.pdf (3 bytes)",
             "_meta": {"acpgate": {"modelOutput": model_view}}})
    acc.add({"sessionUpdate": "tool_call_update", "toolCallId": "x", "status": "completed",
             "_meta": {"acpgate": {"modelOutput": ["not", "text"]}}})
    result = acc.items[2]
    assert result.output == "Delivered a.pdf (3 bytes)" and result.text == model_view
    assert replay_updates(acc.items)[2]["rawOutput"] == "Delivered a.pdf (3 bytes)"
    meta = history_meta(acc.items)
    assert meta[2]["text"] == model_view and meta[2]["output"] == "Delivered a.pdf (3 bytes)"


def test_past_keep_chars_the_accumulator_spills_but_still_hands_back_other_updates() -> None:
    acc = TurnAccumulator(user_text="go", keep_chars=1000)
    chunk = "x" * 20
    others = acc.add_many([chunk] * (TEXT_BLOCK_CHUNKS * 2)
                          + [{"sessionUpdate": "current_mode_update", "currentModeId": "a"}])
    assert acc.spilled
    assert others == [{"sessionUpdate": "current_mode_update", "currentModeId": "a"}]
    assert [i.text for i in acc.items] == ["go"], "nothing of the turn kept but its user item"
    assert acc.text == ("x" * 20 * TEXT_BLOCK_CHUNKS)[:1000]
    acc.add({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "t"}})
    assert len(acc.items) == 1


def test_without_keep_chars_nothing_spills() -> None:
    acc = TurnAccumulator(user_text="go")
    acc.add_many(["x" * 100] * (TEXT_BLOCK_CHUNKS * 4))
    assert not acc.spilled
    assert len(acc.items[1].text) == 100 * TEXT_BLOCK_CHUNKS * 4


def test_what_finishes_between_turns_is_its_result_alone() -> None:
    """Between turns only finished tool calls make history items: a card's completion is its
    result (the child's answer), a call created finished is its call and result, and text,
    a call still running or any other update makes nothing."""
    card = {"sessionUpdate": "tool_call_update", "toolCallId": "acpgate-subagent-c",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "answer"}}]}
    quick = {"sessionUpdate": "tool_call", "toolCallId": "t9", "title": "Quick",
             "kind": "read", "status": "failed", "rawOutput": "gone"}
    idle = [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}},
            {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"},
            {"sessionUpdate": "current_mode_update", "currentModeId": "code"}]
    assert finished_calls(idle) == []
    items = finished_calls([*idle, card, quick])
    assert [(i.role, i.tool_call_id, i.status, i.output) for i in items] == [
        (session_pb2.HistoryItem.ROLE_TOOL_RESULT, "acpgate-subagent-c", "completed", "answer"),
        (session_pb2.HistoryItem.ROLE_TOOL_CALL, "t9", "", ""),
        (session_pb2.HistoryItem.ROLE_TOOL_RESULT, "t9", "failed", "gone")]
