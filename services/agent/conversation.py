"""The provider-neutral conversation: messages, tool calls, and trimming to a budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from services.common.protocol import CANCEL_MARKER

Role = Literal["user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for (arguments already parsed)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Message:
    """One message of the conversation.

    ``user`` carries ``text``; ``assistant`` carries ``text`` and optional
    ``tool_calls``; ``tool`` carries the result ``text`` for ``tool_call_id``.
    """

    role: Role
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""
    tool_name: str = ""
    #: For ``tool`` messages: the call failed (or was denied).
    failed: bool = False

    def size(self) -> int:
        """Approximate size in characters, for the context budget."""
        n = len(self.text)
        for call in self.tool_calls:
            n += len(call.name) + len(str(call.arguments))
        return n


def group_turns(messages: list[Message]) -> list[list[Message]]:
    """Split messages into turns: each user message starts a new turn.

    Tool results always follow the assistant message that asked for them, so a
    turn never separates a tool call from its result.
    """
    turns: list[list[Message]] = []
    for msg in messages:
        if msg.role == "user" or not turns:
            turns.append([msg])
        else:
            turns[-1].append(msg)
    return turns


def trim_to_budget(messages: list[Message], budget_chars: int) -> list[Message]:
    """Drop the oldest whole turns until the total size fits ``budget_chars``.

    The newest turn is always kept, even when it alone exceeds the budget:
    without it the model would not see the request it is answering.
    """
    turns = group_turns(messages)
    sizes = [sum(m.size() for m in t) for t in turns]
    total = sum(sizes)
    start = 0
    while total > budget_chars and start < len(turns) - 1:
        total -= sizes[start]
        start += 1
    return [m for t in turns[start:] for m in t]


def sanitize(messages: list[Message]) -> list[Message]:
    """Make a conversation valid for every provider.

    Tool calls without a result get a placeholder result, results without a
    call are dropped: providers reject both, and seeded history may hold either
    (e.g. a turn that stopped between the call and its result).
    """
    out: list[Message] = []
    pending: dict[str, ToolCall] = {}

    def flush() -> None:
        for call in pending.values():
            out.append(
                Message(role="tool", text="(no result recorded)", tool_call_id=call.id,
                        tool_name=call.name)
            )
        pending.clear()

    for msg in messages:
        if msg.role == "tool":
            if msg.tool_call_id in pending:
                pending.pop(msg.tool_call_id)
                out.append(msg)
            continue
        flush()
        out.append(msg)
        if msg.role == "assistant":
            pending = {c.id: c for c in msg.tool_calls}
    flush()
    return out


def close_cancelled(messages: list[Message]) -> None:
    """End a turn the client cancelled the way the model is told of it: the marker
    ``[turn cancelled via client]`` after what the turn produced (appended to its last
    assistant text, or as an assistant message of its own). The live session and a
    conversation seeded from the edge's stored history do the same."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant" and not last.tool_calls:
        last.text = f"{last.text}\n\n{CANCEL_MARKER}" if last.text else CANCEL_MARKER
    else:
        messages.append(Message(role="assistant", text=CANCEL_MARKER))
