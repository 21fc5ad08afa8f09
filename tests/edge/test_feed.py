"""The session's numbered updates and their ring (``services.edge.sessions.feed``)."""

from __future__ import annotations

import orjson

from services.edge.adapter.relay_lines import update_prefix
from services.edge.sessions.feed import SessionFeed


def _update(line: str) -> dict[str, object]:
    msg = orjson.loads(line)
    assert msg["params"]["sessionId"] == "s1"
    update: dict[str, object] = msg["params"]["update"]
    return update


def test_every_update_is_numbered_whatever_the_agent_put_there() -> None:
    feed = SessionFeed("s1", max_chars=1 << 20, start_id=100)
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "b"}}
    forged = {"sessionUpdate": "tool_call", "toolCallId": "t",
              "_meta": {"acpgate": {"eventId": 1, "x": 2}, "vendor": True}}
    raw = update_prefix("s1") + orjson.dumps(chunk).decode() + "}}"
    events = feed.stamp(["a", chunk, forged], [None, raw, None])
    updates = [_update(e.line) for e in events]
    assert [u["_meta"]["acpgate"]["eventId"] for u in updates] == [100, 101, 102]  # type: ignore[index]
    assert updates[2]["_meta"] == {"acpgate": {"eventId": 102, "x": 2}, "vendor": True}
    # The two text chunks are one message; the tool call none.
    assert updates[0]["messageId"] == updates[1]["messageId"] == events[0].message_id
    assert "messageId" not in updates[2]
    assert updates[1]["content"] == {"type": "text", "text": "b"}


def test_an_agents_own_message_ids_are_kept_and_a_new_message_gets_a_new_one() -> None:
    feed = SessionFeed("s1", max_chars=1 << 20, start_id=1)
    mine = {"sessionUpdate": "agent_message_chunk", "messageId": "m\"1",
            "content": {"type": "text", "text": "x"}}
    events = feed.stamp([mine, "y", {"sessionUpdate": "plan", "entries": []}, "z"], None)
    ids = [e.message_id for e in events]
    assert ids[0] == ids[1] == 'm"1' and ids[2] == "" and ids[3] not in ("", 'm"1')
    assert _update(events[1].line)["messageId"] == 'm"1'


def test_replay_after_an_id_or_a_message_and_what_the_ring_lost() -> None:
    feed = SessionFeed("s1", max_chars=800, start_id=1)
    feed.turn_started()
    events = feed.stamp([f"chunk {i}" for i in range(3)], None)
    assert [e.event_id for e in feed.after(1) or []] == [2, 3]
    assert feed.after(3) == [] and feed.after(4) is None
    assert [e.event_id for e in feed.after_message(events[0].message_id) or []] == []
    assert [e.event_id for e in feed.live_turn() or []] == [1, 2, 3]
    feed.stamp([f"later {i}" for i in range(6)], None)  # the oldest fall out of the ring
    assert feed.evicted > 0
    assert feed.after(1) is None and feed.live_turn() is None
    feed.turn_stored()
    assert feed.live_turn() == []
    assert feed.kept_chars <= 800


def test_only_a_message_id_acpgate_assigned_is_a_resume_point() -> None:
    feed = SessionFeed("s1", max_chars=1 << 20, start_id=1)
    theirs = {"sessionUpdate": "agent_message_chunk", "messageId": "2",
              "content": {"type": "text", "text": "x"}}
    plan = {"sessionUpdate": "plan", "entries": []}
    events = feed.stamp([theirs, plan, theirs, plan, "mine"], None)
    assert [e.assigned for e in events] == [False, False, False, False, True]
    # The agent's id (digits: also an event id) is no point; acpgate's and event ids are.
    assert feed.after_point("2") is None and feed.after_message("2") is None
    assert feed.after_point(events[4].message_id) == []
    assert [e.event_id for e in feed.after_point(3) or []] == [4, 5]
    assert [e.event_id for e in feed.after_point("3") or []] == [4, 5]
