"""The names MCP tools go by: ``<server>__<tool>``, in the alphabet every model API accepts.

Model APIs take tool names of ``[A-Za-z0-9_-]``, at most 64 characters
(OpenAI's limit, the strictest). Server names are human-readable ("My Docs")
and tool names may use dots or slashes, so both halves are reduced to that
alphabet; a name that would be too long is cut and ends in a short hash of the
original pair, so two long names never collide by truncation. Policy patterns
(``auto_approve``/``always_ask``) match these exposed names.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "server_prefix", "tool_name"]

SEPARATOR = "__"
MAX_TOOL_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_HASH_CHARS = 8


def _clean(text: str) -> str:
    cleaned = _UNSAFE.sub("_", text.strip()).strip("_")
    return cleaned or "x"


def server_prefix(server: str) -> str:
    """``<cleaned server name>__``: how every tool of that server starts."""
    return _clean(server) + SEPARATOR


def tool_name(server: str, tool: str) -> str:
    """The exposed name of ``tool`` of ``server`` (stable for the same pair)."""
    name = server_prefix(server) + _clean(tool)
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[:MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest}"
