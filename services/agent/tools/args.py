"""Parsing and summarising tool arguments."""

from __future__ import annotations

import unicodedata
from typing import Any

import orjson

#: Key under which unparseable arguments are kept, so the tool can say what went wrong.
RAW_ARGS_KEY = "_unparsed_arguments"


def parse_arguments(text: str) -> dict[str, Any]:
    """Parse a tool call's JSON arguments; bad JSON is kept for a clear tool error."""
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {RAW_ARGS_KEY: text}
    return value if isinstance(value, dict) else {RAW_ARGS_KEY: text}


#: Characters of an approval summary shown before it is cut (with a marker saying how many).
SUMMARY_LIMIT = 4000

#: Visible stand-ins for the line-breaking characters; everything else invisible is ``<U+XXXX>``.
_VISIBLE = {"\n": "⏎", "\r": "␍", "\t": "⇥"}


def _visible(ch: str) -> str:
    """``ch``, or a visible stand-in when it would break the line or hide itself."""
    if ch in _VISIBLE:
        return _VISIBLE[ch]
    # Cc control, Cf format (bidi overrides, zero-width), Zl/Zp separators, Cs, Co, Cn.
    if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
        return f"<U+{ord(ch):04X}>"
    return ch


def one_line(args: dict[str, Any], limit: int = SUMMARY_LIMIT) -> str:
    """A faithful one-line summary of arguments for approvals (command or path when present).

    Nothing is hidden from the person approving: newlines and other control or
    invisible characters are shown as ``⏎``, ``␍``, ``⇥`` or ``<U+XXXX>`` (two
    commands never look like one), spaces are kept as they are, and a summary
    longer than ``limit`` ends in a marker that says how many characters were
    cut. The full arguments go to the client separately (``rawInput.arguments``).
    """
    for key in ("command", "path", "pattern", "question"):
        value = args.get(key)
        if isinstance(value, str) and value:
            text = value
            break
    else:
        text = orjson.dumps(args, default=str).decode()
    shown = "".join(_visible(ch) for ch in text)
    if len(shown) <= limit:
        return shown
    cut = len(shown) - limit
    return f"{shown[:limit]}… [{cut} more characters not shown; see the full arguments]"
