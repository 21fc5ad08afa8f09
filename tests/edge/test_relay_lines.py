"""The shape-recognised ``session/update`` relay gives the frames the parsed path gives.

:class:`services.edge.adapter.relay_lines.UpdateLines` relays an adapter's compact
update lines with the session id rewritten in the text. Each awkward line here
is run through it and through what the JSON-RPC path does with it (parse,
rewrite ``params.sessionId``, encode): a recognised line must carry the same
message (and, for a compactly encoded one, the same bytes) and the same update
for the turn; every other line must reach the general path, in stream order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from acpgate_contracts.session.v1 import session_pb2
from services.common.jsonrpc import notification_lines
from services.common.turn_items import TurnAccumulator
from services.edge.adapter.relay_lines import RelayedUpdate, UpdateLines, update_prefix

ADAPTER_ID = "adapter-own-id"
EDGE_ID = "0b0c5e0e-1234-4567-89ab-0123456789ab"


def _line(update: Any, sid: str = ADAPTER_ID, **top: Any) -> str:
    message = {"jsonrpc": "2.0", "method": "session/update",
               "params": {"sessionId": sid, "update": update}, **top}
    return orjson.dumps(message).decode()


def _chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def _parsed_path(line: str) -> str:
    """What the JSON-RPC peer and the adapter client make of a session/update line."""
    params = orjson.loads(line)["params"]
    params["sessionId"] = EDGE_ID
    return notification_lines("session/update", [params])[0]


def _run(lines: Sequence[str], *, screen: bool = False) -> list[tuple[str, Any]]:
    """The runs ``relay`` hands on, in order: ("updates", [(update, line)]) or ("others", lines)."""
    out: list[tuple[str, Any]] = []

    async def updates(parsed: Sequence[RelayedUpdate], relayed: list[str]) -> None:
        assert len(parsed) == len(relayed)
        out.append(("updates", list(zip(parsed, relayed, strict=True))))

    async def others(rest: list[str]) -> None:
        out.append(("others", list(rest)))

    asyncio.run(UpdateLines().relay(lines, ADAPTER_ID, EDGE_ID, updates, others,
                                    screen=screen))
    return out


def _one(line: str) -> tuple[str, Any]:
    runs = _run([line])
    assert len(runs) == 1
    kind, items = runs[0]
    if kind == "others":
        assert items == [line]
        return kind, None
    assert len(items) == 1
    return kind, items[0]


RECOGNISED = [
    _line(_chunk("12:345 ")),
    _line(_chunk("")),
    _line(_chunk("日本語 é ünï")),
    _line(_chunk('say "hi" \\ there')),  # escapes: parsed, not read as text
    _line(_chunk("line\nbreak\ttab\x01ctl")),
    _line(_chunk("a\u2028b")),  # a raw separator: not printable, parsed
    _line(_chunk(_line(_chunk("nested")))),  # the adapter's prefix and id inside the text
    _line(_chunk(f"{ADAPTER_ID} {update_prefix(ADAPTER_ID)}")),
    _line({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "x"}}),
    _line({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ls", "status": "pending",
           "rawInput": {"command": "ls", "n": 1.5, "big": 2 ** 60}}),
    _line({"sessionUpdate": "current_mode_update", "currentModeId": "ask"}),
    _line({"sessionUpdate": "agent_message_chunk",
           "content": {"type": "text", "text": "x"}, "_meta": {"k": [1, None, True]}}),
    _line({}),
]


@pytest.mark.parametrize("line", RECOGNISED)
def test_a_compact_line_is_relayed_as_the_parsed_path_encodes_it(line: str) -> None:
    kind, (update, relayed) = _one(line)
    assert kind == "updates"
    assert relayed == _parsed_path(line)  # the very bytes: orjson wrote the adapter's line
    expected = orjson.loads(line)["params"]["update"]
    if isinstance(update, str):  # read without parsing: a plain one-text-block chunk
        assert expected == _chunk(update)
    else:
        assert update == expected


@pytest.mark.parametrize("text", ['a \\"q\\" b', "caf\\u00e9", "slash \\/", "nl \\n", "\\ud83d\\ude00"])
def test_another_spelling_of_the_update_keeps_its_value(text: str) -> None:
    """The adapter's own spelling of ``update`` is kept: the same JSON value."""
    line = update_prefix(ADAPTER_ID) + '{"sessionUpdate":"agent_message_chunk","content":' \
        '{"type":"text","text":"' + text + '"}}}}'
    kind, (update, relayed) = _one(line)
    assert kind == "updates"
    assert orjson.loads(relayed) == orjson.loads(_parsed_path(line))
    assert update == orjson.loads(line)["params"]["update"]


def _spaced(update: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": ADAPTER_ID, "update": update}})


PREFIX = update_prefix(ADAPTER_ID)
CHUNK_HEAD = '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'

OTHERS = [
    _line(_chunk("x"), sid="another-session"),
    _line(_chunk("x"), sid=ADAPTER_ID + "x"),
    _spaced(_chunk("x")),  # another spacing
    orjson.dumps({"method": "session/update", "jsonrpc": "2.0",
                  "params": {"sessionId": ADAPTER_ID, "update": _chunk("x")}}).decode(),
    orjson.dumps({"jsonrpc": "2.0", "method": "session/update",
                  "params": {"update": _chunk("x"), "sessionId": ADAPTER_ID}}).decode(),
    _line(_chunk("x"), id=None),  # the parsed path drops a null id; not this shape
    _line(_chunk("x")) + " ",
    PREFIX + '{"a":1}},"params":{"sessionId":"s","update":{"b":2}}}',  # data after U
    PREFIX + '{"a":1},"extra":2}}',
    PREFIX + "[1,2]}}",  # update not an object
    PREFIX + '"text"}}',
    PREFIX + "null}}",
    PREFIX + "}}",
    PREFIX + CHUNK_HEAD + "}}",  # head and tail overlap: not valid JSON
    PREFIX + CHUNK_HEAD + "raw\x01control" + '"}}}}',  # invalid JSON (raw control character)
    PREFIX + CHUNK_HEAD + 'ha"lf"}}}}',  # a lone quote inside: invalid JSON
    PREFIX + CHUNK_HEAD + "lone \\ud800" + '"}}}}',  # lone surrogate escape: refused by the parser
    PREFIX + CHUNK_HEAD + "truncated",
    '{"jsonrpc":"2.0","id":3,"result":{}}',
    "this is not json",
    "",
]


@pytest.mark.parametrize("line", OTHERS)
def test_every_other_line_takes_the_general_path(line: str) -> None:
    assert _one(line)[0] == "others"


def test_stream_order_is_kept_across_runs() -> None:
    a, b, c = (_line(_chunk(t)) for t in ("a", "b", "c"))
    response, junk = '{"jsonrpc":"2.0","id":1,"result":{}}', "junk"
    runs = _run([a, b, response, junk, c, response])
    assert [(kind, [x[0] if kind == "updates" else x for x in items]) for kind, items in runs] == [
        ("updates", ["a", "b"]), ("others", [response, junk]), ("updates", ["c"]),
        ("others", [response])]


def test_no_adapter_session_yet_means_the_general_path() -> None:
    seen: list[list[str]] = []

    async def others(rest: list[str]) -> None:
        seen.append(rest)

    async def updates(parsed: Sequence[RelayedUpdate], relayed: list[str]) -> None:
        raise AssertionError("nothing is recognised before the adapter has a session")

    line = update_prefix("") + orjson.dumps(_chunk("x")).decode() + "}}"
    asyncio.run(UpdateLines().relay([line], "", EDGE_ID, updates, others))
    assert seen == [[line]]


ODD_UPDATES: list[Any] = [
    _chunk("one "),
    {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}},
    {"sessionUpdate": "agent_message_chunk", "content": [{"type": "text", "text": "list "}]},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 5}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}},
    {"sessionUpdate": "agent_message_chunk", "content": "nope"},
    {"sessionUpdate": ["unhashable"]},
    {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
    {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ls", "status": "completed",
     "rawOutput": "out"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"},
    {"sessionUpdate": "plan", "entries": [{"content": "x"}]},
    {"sessionUpdate": "plan", "entries": "odd"},
    {},
    _chunk("two"),
]


def _items(acc: TurnAccumulator) -> list[session_pb2.HistoryItem]:
    return acc.items


def test_add_many_records_what_add_records() -> None:
    one = TurnAccumulator(user_text="q")
    for update in ODD_UPDATES:
        one.add(update)
    many = TurnAccumulator(user_text="q")
    # The text chunks as relay_lines hands them on (their text), the rest as objects.
    burst: list[RelayedUpdate] = [
        u["content"]["text"] if u is ODD_UPDATES[0] or u is ODD_UPDATES[-1] else u
        for u in ODD_UPDATES]
    others = many.add_many(burst[:5])
    others += many.add_many(burst[5:])
    assert _items(many) == _items(one)
    assert many.text == one.text == "one list two"
    assert many.plan_json == one.plan_json
    # Handed back: what is not the turn's (a mode change, an unknown or odd kind).
    assert others == [ODD_UPDATES[6], ODD_UPDATES[7], {}]


def test_a_plain_text_chunk_is_read_without_parsing() -> None:
    kind, (update, _) = _one(_line(_chunk("12:345 ")))
    assert kind == "updates" and update == "12:345 "
    kind, (update, _) = _one(_line(_chunk('say "hi"')))
    assert update == _chunk('say "hi"')  # escapes: parsed


def test_a_run_of_many_lines_is_rewritten_line_by_line() -> None:
    runs = _run(RECOGNISED * 3)
    assert [kind for kind, _ in runs] == ["updates"]
    assert [relayed for _, relayed in runs[0][1]] == [_parsed_path(line) for line in RECOGNISED * 3]


def test_an_external_agents_update_with_acpgate_meta_takes_the_screening_path() -> None:
    forged = {"sessionUpdate": "plan", "entries": [], "_meta": {"acpgate": {"eventId": 1}}}
    escaped = _line(forged).replace('"acpgate"', '"acp\\u0067ate"')
    kept = {"sessionUpdate": "plan", "entries": [], "_meta": {"vendor": 1}}
    lines = [_line(forged), escaped, _line(kept), _line(_chunk("x"))]
    runs = _run(lines, screen=True)
    assert runs[0] == ("others", lines[:2])
    assert runs[1][0] == "updates" and [u for u, _ in runs[1][1]] == [kept, "x"]
    # The built-in agent's lines are not screened: its _meta.acpgate is acpgate's own.
    assert [kind for kind, _ in _run(lines)] == ["updates"]
