"""The built-in agent seeded with a long history in chunks, within its budget.

The edge restores a built-in session with ``session/resume`` and
``_meta.acpgate.historyFollows``, then the stored history in
``_acpgate/history_append`` chunks, the last one ``done``. The agent must end with
the same conversation as from the whole list at once — a chunk may cut a turn
anywhere, between a tool call and its result too — but keep only what its model
could ever see: the newest whole turns within ``context_budget_chars``. The old
single-message form (``_meta.acpgate.history``) still works, within the same
budget, and a session's turns never pile up past it either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.agent.history import HistorySeed, seed_messages
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import M_HISTORY_APPEND, MSG_NO_HISTORY_EXPECTED
from tests.agent.harness import ScriptedProvider, make_config, running_agent, say

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "text": "first"},
    {"role": "assistant", "text": "looking"},
    {"role": "tool_call", "toolCallId": "c1", "toolName": "shell", "arguments": {"command": "ls"}},
    {"role": "tool_result", "toolCallId": "c1", "output": "a b", "status": "completed"},
    {"role": "assistant", "text": "done"},
    {"role": "user", "text": "second"},
    {"role": "thought", "text": "hm"},
    {"role": "assistant", "text": "ok"},
]


def shape(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [(m.role, m.text, tuple(c.id for c in m.tool_calls), m.tool_call_id)
            for m in messages]


@pytest.mark.parametrize("cut", range(1, len(HISTORY)))
def test_any_chunking_seeds_the_same_conversation(cut: int) -> None:
    seed = HistorySeed(None)
    seed.add(HISTORY[:cut])
    seed.add(HISTORY[cut:])
    assert shape(seed.finish()) == shape(seed_messages(HISTORY))


def test_the_seed_keeps_the_newest_turns_within_the_budget() -> None:
    turns = [[{"role": "user", "text": f"q{i} " + "x" * 1000},
              {"role": "assistant", "text": f"a{i}"}] for i in range(50)]
    seed = HistorySeed(5_000)
    for turn in turns:
        seed.add(turn)
        held = sum(len(m.text) for m in seed._messages)
        assert held <= 5_000 + 2_100  # the budget, plus the turn that just began
    kept = seed.finish()
    assert kept[-1].text == "a49" and kept[0].text.startswith("q4")
    # The newest turn stays even when it alone is over the budget.
    assert [m.text for m in seed_messages(turns[0], 10)] == [turns[0][0]["text"], "a0"]


async def test_history_follows_in_chunks(tmp_path: Path) -> None:
    """resume with historyFollows, appends, then a prompt: the model sees the seeded turns."""
    provider = ScriptedProvider([say("fine")])
    async with running_agent(make_config(tmp_path), provider) as c:
        ws = tmp_path / "w"
        ws.mkdir()
        await c.call("session/resume", {"sessionId": "s-old", "cwd": str(ws), "mcpServers": [],
                                        "_meta": {"acpgate": {"historyFollows": True}}})
        await c.call(M_HISTORY_APPEND, {"sessionId": "s-old", "items": HISTORY[:3]})
        await c.call(M_HISTORY_APPEND, {"sessionId": "s-old", "items": HISTORY[3:]})
        await c.call(M_HISTORY_APPEND, {"sessionId": "s-old", "items": [], "done": True})
        with pytest.raises(JsonRpcError) as late:  # the seed is closed
            await c.call(M_HISTORY_APPEND, {"sessionId": "s-old", "items": HISTORY})
        assert late.value.message == MSG_NO_HISTORY_EXPECTED.format(session_id="s-old")
        assert (await c.prompt("s-old", "third"))["stopReason"] == "end_turn"
    sent = provider.calls[0][1]
    assert [m.text for m in sent if m.role == "user"] == ["first", "second", "third"]
    assert [c.id for m in sent for c in m.tool_calls] == ["c1"]


async def test_a_prompt_ends_a_seed_the_edge_left_open(tmp_path: Path) -> None:
    provider = ScriptedProvider([say("fine")])
    async with running_agent(make_config(tmp_path), provider) as c:
        ws = tmp_path / "w"
        ws.mkdir()
        await c.call("session/resume", {"sessionId": "s", "cwd": str(ws), "mcpServers": [],
                                        "_meta": {"acpgate": {"historyFollows": True}}})
        await c.call(M_HISTORY_APPEND, {"sessionId": "s", "items": HISTORY})
        await c.prompt("s", "third")
    assert [m.text for m in provider.calls[0][1] if m.role == "user"] == [
        "first", "second", "third"]


async def test_a_session_holds_about_its_budget_not_its_history(tmp_path: Path) -> None:
    """Turn after turn of big prompts: the agent drops what no model call can see."""
    provider = ScriptedProvider([say("ok")])
    cfg = make_config(tmp_path, context_budget_chars=10_000)
    async with running_agent(cfg, provider) as c:
        ws = tmp_path / "w"
        ws.mkdir()
        sid = await c.new_session(ws)
        for i in range(20):
            await c.prompt(sid, f"{i} " + "p" * 4_000)
        session = c.server._sessions[sid]
        assert sum(m.size() for m in session.messages) <= 10_000 + 4_100
        assert session.messages[-2].text.startswith("19 ")


def test_a_result_the_model_saw_differently_is_seeded_as_the_model_saw_it() -> None:
    """A tool result item's ``text`` (deliver_file's JSON) is what the model gets back, not the
    human ``output``; results without one keep their output."""
    items = [
        {"role": "user", "text": "deliver"},
        {"role": "tool_call", "toolCallId": "d1", "toolName": "deliver_file",
         "arguments": {"path": "a.pdf"}},
        {"role": "tool_result", "toolCallId": "d1", "output": "Delivered a.pdf (3 bytes)",
         "text": '{"uri": "attachment://deliver/ab.pdf"}', "status": "completed"},
    ]
    (_, _, result) = seed_messages(items)
    assert result.role == "tool" and result.text == '{"uri": "attachment://deliver/ab.pdf"}'
    assert seed_messages(HISTORY)[2].text == "a b"


def test_a_cancelled_turn_is_seeded_with_its_marker() -> None:
    """A stored cancelled turn comes back as far as it went, then the cancel marker,
    as the live session keeps it — in the middle of the history and as its last turn, whatever
    the chunks; a tool call it left without a result gets a placeholder."""
    cancelled: list[dict[str, Any]] = [
        {"role": "user", "text": "stop me", "status": "cancelled"},
        {"role": "assistant", "text": "part"},
        {"role": "tool_call", "toolCallId": "c9", "toolName": "shell", "arguments": {}},
    ]
    history = cancelled + HISTORY[:2]
    whole = seed_messages(history)
    assert [(m.role, m.text) for m in whole] == [
        ("user", "stop me"), ("assistant", "part"), ("tool", "(no result recorded)"),
        ("assistant", "[turn cancelled via client]"), ("user", "first"),
        ("assistant", "looking")]
    seed = HistorySeed(None)
    for item in history:  # one item per chunk
        seed.add([item])
    assert shape(seed.finish()) == shape(whole)
    last = seed_messages(HISTORY[:2] + cancelled[:2])
    assert [(m.role, m.text) for m in last][-2:] == [
        ("user", "stop me"), ("assistant", "part\n\n[turn cancelled via client]")]
