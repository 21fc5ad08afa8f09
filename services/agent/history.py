"""Restoring a conversation: seeding it from the edge's history items, and replaying it.

A history item, as the edge builds it (docs/contracts.md)::

    {"role": "user"|"assistant"|"thought"|"tool_call"|"tool_result",
     "text"?, "toolCallId"?, "toolName"?, "toolKind"?, "title"?,
     "arguments"? (object), "output"?, "status"?}

A user item with ``"status": "cancelled"`` starts a turn the client cancelled:
the turn is seeded with what it produced and ends with the cancel
marker, as the live session keeps it (:func:`~services.agent.conversation.close_cancelled`).

The items come in chunks (``_acpgate/history_append``, after a ``session/resume``
with ``_meta.acpgate.historyFollows``) or, from older edges, all at once
(``_meta.acpgate.history``). A :class:`HistorySeed` takes them chunk by chunk and
keeps only what the model could ever see — the newest whole turns within the
agent's ``context_budget_chars`` (:func:`~services.agent.conversation.trim_to_budget`),
the newest turn always — so a long history never sits in the agent whole.
"""

from __future__ import annotations

import uuid
from typing import Any

from services.agent import updates
from services.agent.conversation import (
    Message,
    ToolCall,
    close_cancelled,
    sanitize,
    trim_to_budget,
)
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


#: A user item's ``status`` of a turn the client cancelled.
CANCELLED: str = "cancelled"


def _extend(out: list[Message], items: Any, cancelled: bool = False) -> bool:
    """Append the messages ``items`` describe to ``out`` (the conversation so far: an
    assistant item continues the last assistant message); malformed items are skipped.
    ``cancelled``: the turn ``out`` ends with was cancelled and is not closed yet; returns
    the same for the turn ``out`` ends with now."""
    if not isinstance(items, list):
        return cancelled
    for item in items:
        if not isinstance(item, dict):
            continue
        role = item.get("role")
        if role == HISTORY_ROLE_USER:
            if cancelled:
                close_cancelled(out)
            cancelled = item.get("status") == CANCELLED
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
                # "text" is what the model saw when it was not "output" (deliver_file's
                # JSON with its uri): the model gets back what it got then.
                text=_text(item, "text", "output"),
                tool_call_id=_text(item, "toolCallId"),
                tool_name=_text(item, "toolName", "title"),
                failed=item.get("status") == "failed",
            ))
        # "thought" items are shown to people, never sent back to a model.
    return cancelled


def seed_messages(items: Any, budget_chars: int | None = None) -> list[Message]:
    """The conversation described by history items (within ``budget_chars``, when given)."""
    seed = HistorySeed(budget_chars)
    seed.add(items)
    return seed.finish()


class HistorySeed:
    """A conversation seeded chunk by chunk, kept within ``budget_chars`` (None: all of it).

    Chunks may cut a turn anywhere (a tool call in one, its result in the next): older
    turns are dropped only once a newer one has begun, and the conversation is made
    valid for the providers (:func:`~services.agent.conversation.sanitize`) once, at
    :meth:`finish`.
    """

    def __init__(self, budget_chars: int | None) -> None:
        self._budget = budget_chars
        self._messages: list[Message] = []
        #: The newest turn was cancelled and its marker is still to come.
        self._cancelled = False

    def add(self, items: Any) -> None:
        """Take one chunk of history items, in order."""
        self._cancelled = _extend(self._messages, items, self._cancelled)
        if self._budget is not None:
            self._messages = trim_to_budget(self._messages, self._budget)

    def finish(self) -> list[Message]:
        """The seeded conversation, valid for every provider."""
        messages = sanitize(self._messages)
        if self._cancelled:
            close_cancelled(messages)
        return messages


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
