"""An agent naming fresh tool call ids without end within one turn, from the attacker's side.

The edge accumulates a running turn's history items as they stream, up to
``TURN_KEEP_CHARS`` (past it the turn spills: its items come from the event log at its end).
A tool call costs an item and an id whether or not it has text: a hundred thousand
calls with fresh ids (created finished, no output) used to be kept whole — 200,000
items. Each item counts against the bound now, so the turn spills and keeps nothing.
"""

from __future__ import annotations

from typing import Any

from services.common.turn_items import TurnAccumulator
from services.edge.sessions.turn import TURN_KEEP_CHARS

_FLOOD = 100_000


def _call(n: int) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": f"call-{n}", "title": "t",
            "kind": "other", "status": "completed"}


def test_fresh_tool_call_ids_spill_the_turn() -> None:
    acc = TurnAccumulator(user_text="go", keep_chars=TURN_KEEP_CHARS)
    for start in range(0, _FLOOD, 100):
        acc.add_many([_call(n) for n in range(start, start + 100)])
    assert acc.spilled
    assert len(acc.items) == 1  # the user's item alone: the log holds the turn
    assert not acc._calls and not acc._results


def test_a_few_tool_calls_are_kept() -> None:
    acc = TurnAccumulator(user_text="go", keep_chars=TURN_KEEP_CHARS)
    acc.add_many([_call(n) for n in range(100)])
    assert not acc.spilled
    assert len(acc.items) == 1 + 2 * 100  # each call and its (empty) result
