"""Builders for the exact ``session/update`` shapes of SPEC §5."""

from __future__ import annotations

from typing import Any

from services.common.protocol import (
    META_ACPGATE,
    META_MODEL_OUTPUT,
    U_AGENT_MESSAGE,
    U_AGENT_THOUGHT,
    U_TOOL_CALL,
    U_TOOL_CALL_UPDATE,
    U_USAGE,
    U_USER_MESSAGE,
)


def usage_update(used: int, size: int) -> dict[str, Any]:
    """ACP ``usage_update``: tokens the context holds now, of ``size`` (the agent's budget)."""
    return {"sessionUpdate": U_USAGE, "used": max(0, used), "size": max(0, size)}


def text_chunk(kind: str, text: str) -> dict[str, Any]:
    """``agent_message_chunk`` / ``agent_thought_chunk`` / ``user_message_chunk``."""
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def message_chunk(text: str) -> dict[str, Any]:
    """A piece of the assistant's reply."""
    return text_chunk(U_AGENT_MESSAGE, text)


def thought_chunk(text: str) -> dict[str, Any]:
    """A piece of the model's reasoning."""
    return text_chunk(U_AGENT_THOUGHT, text)


def user_chunk(text: str) -> dict[str, Any]:
    """A user message, replayed by ``session/load``."""
    return text_chunk(U_USER_MESSAGE, text)


def tool_call(call_id: str, name: str, kind: str, raw_input: dict[str, Any],
              content: list[dict[str, Any]] | None = None,
              status: str = "pending") -> dict[str, Any]:
    """The ``tool_call`` that opens a call (diff ``content`` for edits/writes)."""
    update: dict[str, Any] = {
        "sessionUpdate": U_TOOL_CALL,
        "toolCallId": call_id,
        "name": name,
        "title": name,
        "kind": kind,
        "status": status,
        "rawInput": raw_input,
    }
    if content:
        update["content"] = content
    return update


def text_content(text: str) -> list[dict[str, Any]]:
    """The default ``content`` of a ``tool_call_update``: the output as text."""
    return [{"type": "content", "content": {"type": "text", "text": text}}]


def tool_call_update(call_id: str, name: str, kind: str, output: str, *, ok: bool,
                     title: str | None = None,
                     content: list[dict[str, Any]] | None = None,
                     model_output: str | None = None) -> dict[str, Any]:
    """The ``tool_call_update`` that closes a call: rawOutput = body = the output.

    ``model_output`` (the model's view, when it is not the output) rides along in
    ``_meta.acpgate.modelOutput``, for the edge to store (docs/contracts.md).
    """
    update: dict[str, Any] = {
        "sessionUpdate": U_TOOL_CALL_UPDATE,
        "toolCallId": call_id,
        "status": "completed" if ok else "failed",
        "name": name,
        "title": title or name,
        "kind": kind,
        "rawOutput": output,
        "body": output,
        "content": content if content is not None else text_content(output),
    }
    if model_output is not None:
        update["_meta"] = {META_ACPGATE: {META_MODEL_OUTPUT: model_output}}
    return update
