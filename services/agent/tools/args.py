"""Parsing and summarising tool arguments."""

from __future__ import annotations

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


def one_line(args: dict[str, Any], limit: int = 200) -> str:
    """A one-line summary of arguments for approvals (command or path when present)."""
    for key in ("command", "path", "pattern", "question"):
        value = args.get(key)
        if isinstance(value, str) and value:
            text = value
            break
    else:
        text = orjson.dumps(args, default=str).decode()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
