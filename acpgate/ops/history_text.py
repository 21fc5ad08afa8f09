"""A stored conversation as a person reads it (``acpgate sessions show``).

Turn by turn: what the user said and the agent answered in full, its thoughts
on one line each, every tool call with its title and arguments (one line),
its result with its status and the first lines of its output.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterable, Iterator

from acpgate_contracts.session.v1 import session_pb2 as spb

__all__ = ["history_lines"]

#: Lines of a tool's output shown (the rest is counted).
OUTPUT_LINES = 6
_INDENT = "    "


def _wrapped(label: str, text: str, width: int) -> list[str]:
    """``label: text``, wrapped to ``width``, later lines indented."""
    out: list[str] = []
    for n, paragraph in enumerate(text.splitlines() or [""]):
        lead = f"{label}: " if n == 0 else " " * (len(label) + 2)
        out += textwrap.wrap(paragraph, width=max(40, width), initial_indent=lead,
                             subsequent_indent=" " * (len(label) + 2),
                             replace_whitespace=False) or [lead.rstrip()]
    return out


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def _arguments(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, separators=(", ", ": "))
    except ValueError:
        return raw


def _item(item: spb.HistoryItem, width: int) -> Iterator[str]:
    role = item.role
    if role == spb.HistoryItem.ROLE_USER:
        yield from _wrapped("you", item.text, width)
    elif role == spb.HistoryItem.ROLE_ASSISTANT:
        yield from _wrapped("agent", item.text, width)
    elif role == spb.HistoryItem.ROLE_THOUGHT:
        yield _one_line(f"(thought) {item.text}", width)
    elif role == spb.HistoryItem.ROLE_TOOL_CALL:
        title = item.title or item.tool_name
        kind = f" ({item.tool_kind})" if item.tool_kind else ""
        yield _one_line(f"→ {item.tool_name}{kind}: {title}", width)
        if item.arguments_json:
            yield _one_line(f"{_INDENT}args {_arguments(item.arguments_json)}", width)
    elif role == spb.HistoryItem.ROLE_TOOL_RESULT:
        yield f"← {item.status or 'done'}"
        lines = (item.output or item.text).splitlines()
        for line in lines[:OUTPUT_LINES]:
            yield _one_line(f"{_INDENT}{line}", width)
        if len(lines) > OUTPUT_LINES:
            yield f"{_INDENT}… {len(lines) - OUTPUT_LINES} more lines"


def history_lines(items: Iterable[spb.HistoryItem], width: int) -> Iterator[str]:
    """The conversation, a header before each turn."""
    turn = None
    for item in items:
        if item.turn != turn:
            turn = item.turn
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item.created_at / 1000))
            yield ""
            yield f"── turn {turn} · {when} ──"
        yield from _item(item, width)
