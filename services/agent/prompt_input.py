"""Turning a ``session/prompt`` ``prompt`` param into the user's text (SPEC §4)."""

from __future__ import annotations

from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS, MSG_PROMPT_EMPTY, MSG_PROMPT_MISSING


def prompt_text(prompt: Any) -> str:
    """Text and resource-text parts joined with blank lines; other blocks are ignored.

    A string prompt is used verbatim. Raises -32602 for a missing/invalid
    prompt and for one with no text at all (SPEC §4: an exactly empty join);
    whitespace-only text is a valid prompt and is passed on unchanged.
    """
    if isinstance(prompt, str):
        if not prompt:
            raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_EMPTY)
        return prompt
    if not isinstance(prompt, list):
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_MISSING)
    parts: list[str] = []
    for block in prompt:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in (None, "text") and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource":
            resource = block.get("resource")
            if isinstance(resource, dict) and isinstance(resource.get("text"), str):
                parts.append(resource["text"])
    text = "\n\n".join(parts)
    if not text:
        raise JsonRpcError(INVALID_PARAMS, MSG_PROMPT_EMPTY)
    return text
