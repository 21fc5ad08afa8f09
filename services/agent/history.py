"""Restoring a conversation: seeding from ``_meta.acpgate.history`` and replaying it.

A history item, as the edge builds it (docs/contracts.md)::

    {"role": "user"|"assistant"|"thought"|"tool_call"|"tool_result",
     "text"?, "toolCallId"?, "toolName"?, "toolKind"?, "title"?,
     "arguments"? (object), "output"?, "status"?}
"""

from __future__ import annotations

import uuid
from typing import Any

from services.agent import updates
from services.agent.conversation import Message, ToolCall, sanitize
from services.agent.tools import tool_kind
from services.common.protocol import (
    HISTORY_ROLE_ASSISTANT,
    HISTORY_ROLE_TOOL_CALL,
    HISTORY_ROLE_TOOL_RESULT,
    HISTORY_ROLE_USER,
)


def _text(item: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = item.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def model_arguments(tool: str, raw_input: dict[str, Any]) -> dict[str, Any]:
    """The tool's own arguments from a stored ``rawInput``.

    Writes and edits are stored as their diff (``{path, oldText, newText}``, SPEC §5);
    the model gets them back in the shape of its tools' parameters.
    """
    if "newText" in raw_input and "path" in raw_input:
        if tool == "file_write":
            return {"path": raw_input["path"], "content": raw_input["newText"]}
        if tool == "file_edit":
            return {"path": raw_input["path"], "old_string": raw_input.get("oldText") or "",
                    "new_string": raw_input["newText"]}
    return raw_input


def seed_messages(items: Any) -> list[Message]:
    """The conversation described by history items; malformed items are skipped."""
    out: list[Message] = []
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, dict):
            continue
        role = item.get("role")
        last = out[-1] if out else None
        if role == HISTORY_ROLE_USER:
            out.append(Message(role="user", text=_text(item, "text")))
        elif role == HISTORY_ROLE_ASSISTANT:
            text = _text(item, "text")
            if not text:
                continue
            if last is not None and last.role == "assistant" and not last.tool_calls:
                last.text += text
            else:
                out.append(Message(role="assistant", text=text))
        elif role == HISTORY_ROLE_TOOL_CALL:
            args = item.get("arguments")
            name = _text(item, "toolName", "title") or "unknown"
            call = ToolCall(
                id=_text(item, "toolCallId") or f"restored-{uuid.uuid4().hex[:12]}",
                name=name,
                arguments=model_arguments(name, args if isinstance(args, dict) else {}),
            )
            if last is not None and last.role == "assistant":
                last.tool_calls.append(call)
            else:
                out.append(Message(role="assistant", tool_calls=[call]))
        elif role == HISTORY_ROLE_TOOL_RESULT:
            out.append(Message(
                role="tool",
                text=_text(item, "output", "text"),
                tool_call_id=_text(item, "toolCallId"),
                tool_name=_text(item, "toolName", "title"),
                failed=item.get("status") == "failed",
            ))
        # "thought" items are shown to people, never sent back to a model.
    return sanitize(out)


def replay_updates(messages: list[Message]) -> list[dict[str, Any]]:
    """``session/update`` payloads that show a conversation to a client (``session/load``)."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for msg in messages:
        if msg.role == "user":
            out.append(updates.user_chunk(msg.text))
        elif msg.role == "assistant":
            if msg.text:
                out.append(updates.message_chunk(msg.text))
            for call in msg.tool_calls:
                names[call.id] = call.name
                out.append(updates.tool_call(call.id, call.name, tool_kind(call.name),
                                             call.arguments, status="completed"))
        else:
            name = msg.tool_name or names.get(msg.tool_call_id, "tool")
            out.append(updates.tool_call_update(msg.tool_call_id, name, tool_kind(name),
                                                msg.text, ok=not msg.failed))
    return out
