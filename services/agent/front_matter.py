"""The YAML-ish front matter of a SKILL.md, read without a YAML library.

A front matter block opens the file with a ``---`` line and ends at the next
``---`` (or ``...``) line. Inside, only what skill files use is understood:

- ``key: value`` at the start of a line (a plain value may end in a ``# comment``);
- a value in double quotes (JSON-style escapes) or single quotes (``''`` is a quote);
- a block value (``key: |`` keeps line breaks, ``key: >`` folds lines) and a plain value
  continued on indented lines (folded), up to the next key;
- blank lines, ``#`` comments; anything else (lists, nested maps) is kept as text of
  the key above it, or ignored at the top level.

Values are strings; unknown keys are returned too (the caller picks what it needs).
Nothing here raises on bad input: a file without a well-formed block gets ``None``.
"""

from __future__ import annotations

import json
import re

#: The block's fences.
OPEN = "---"
CLOSE = ("---", "...")
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*))?$")
_BLOCK = re.compile(r"[|>][+-]?[0-9]?|[|>][0-9][+-]?")


def split(text: str) -> tuple[dict[str, str], str] | None:
    """(the front matter's fields, the body after it), or None without a closed block."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != OPEN:
        return None
    for end in range(1, len(lines)):
        if lines[end].strip() in CLOSE and not lines[end][:1].isspace():
            inner = [line.rstrip("\r\n") for line in lines[1:end]]
            return _fields(inner), "".join(lines[end + 1:])
    return None


def _fields(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    key: str | None = None
    style = ""  # "" plain, "|" literal, ">" folded
    parts: list[str] = []

    def flush() -> None:
        if key is not None:
            fields[key] = _value(style, parts)

    for line in lines:
        match = _KEY.match(line) if line[:1] not in (" ", "\t", "#") else None
        if match is not None:
            flush()
            key, raw = match.group(1), (match.group(2) or "").strip()
            style = raw[0] if _BLOCK.fullmatch(raw) else ""
            parts = [] if style or not raw else [raw]
        elif not line.strip():
            if key is not None and style:
                parts.append("")
        elif line[:1] in (" ", "\t"):
            if key is not None:
                parts.append(line.strip())
        elif not line.startswith("#"):
            flush()  # a top-level line that is no key ends the value above it
            key, style, parts = None, "", []
    flush()
    return fields


def _value(style: str, parts: list[str]) -> str:
    if style == "|":
        return "\n".join(parts).strip("\n")
    if style == ">":
        paragraphs = "\n".join(parts).split("\n\n")
        return "\n".join(" ".join(p.split()) for p in paragraphs).strip()
    return _unquote(" ".join(p for p in parts if p))


def _unquote(value: str) -> str:
    """A scalar's text: a quoted one up to its closing quote (a comment may follow), a plain
    one up to a `` #`` comment; an unclosed quote is kept as written."""
    if value[:1] == '"':
        escaped = False
        for end in range(1, len(value)):
            if value[end] == '"' and not escaped:
                try:
                    decoded = json.loads(value[:end + 1])
                except ValueError:
                    return value[1:end]
                return decoded if isinstance(decoded, str) else value[1:end]
            escaped = value[end] == "\\" and not escaped
        return value
    if value[:1] == "'":
        end = 1
        while end < len(value):
            if value[end] == "'":
                if value[end + 1:end + 2] != "'":
                    return value[1:end].replace("''", "'")
                end += 1
            end += 1
        return value
    comment = value.find(" #")
    return value[:comment].rstrip() if comment >= 0 else value
