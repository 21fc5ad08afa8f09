"""The offline demo model: deterministic, no key, shows the whole protocol.

It answers the newest message by a few fixed rules (each also as a slash command,
``/shell <command>``, ``/read <path>``…, which it advertises; ``/help`` lists them,
see :mod:`services.agent.providers.demo_commands`):

- ``!<command>`` runs ``<command>`` with the shell tool;
- ``read <path>`` reads a file, ``deliver <path>`` delivers one,
  ``write <path> <text>`` writes one;
- ``ask <question> | <choice> | <choice>…`` asks the user;
- ``escalate <summary> | <context>`` escalates a decision to the user (urgency high);
- ``plan`` emits a plan (the todo tool);
- after a tool result it reports that result;
- anything else gets a short reply: what was said, and what to try.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

from services.agent.conversation import Message, ToolCall
from services.agent.providers.base import (
    STOP_TOOL_USE,
    ProviderEvent,
    SlashCommand,
    StreamDone,
    TextDelta,
    ThoughtDelta,
    ToolCallReady,
    ToolSpec,
    UsageReport,
)
from services.agent.providers.demo_commands import (
    CMD_HELP,
    COMMANDS,
    NEWCOMER_TIP,
    help_text,
    parse_slash,
    plain_form,
    usage,
)
from services.common.protocol import STOP_END_TURN

INTRO = "[demo model] "
_RESULT_PREVIEW = 2000
DEMO_PLAN = [
    {"content": "Understand the request", "priority": "high", "status": "completed"},
    {"content": "Make the change", "priority": "medium", "status": "in_progress"},
    {"content": "Run the tests", "priority": "low", "status": "pending"},
]


def _chunks(text: str, parts: int = 4) -> list[str]:
    """Split ``text`` into about ``parts`` word-aligned pieces (never losing characters)."""
    words = text.split(" ")
    size = max(1, -(-len(words) // parts))
    out = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    return [piece + (" " if i < len(out) - 1 else "") for i, piece in enumerate(out)]


def _plan_for(text: str) -> tuple[str, ToolCall | None]:
    """The reply text and optional tool call for a user message."""
    stripped = text.strip()
    slash = parse_slash(stripped)
    if slash is not None:
        name, given = slash
        if name == CMD_HELP:
            return f"{INTRO}{help_text()}", None
        plain = plain_form(name, given)
        if plain is None:
            return f"{INTRO}{usage(name)}", None
        stripped = plain
    low = stripped.lower()
    new_id = f"demo-{uuid.uuid4().hex[:12]}"
    if stripped.startswith("!") and stripped[1:].strip():
        command = stripped[1:].strip()
        return (f"{INTRO}Running `{command}` in the shell.",
                ToolCall(new_id, "shell", {"command": command}))
    for word, tool in (("read ", "file_read"), ("deliver ", "deliver_file")):
        if low.startswith(word) and stripped[len(word):].strip():
            path = stripped[len(word):].strip()
            verb = "Reading" if tool == "file_read" else "Delivering"
            return f"{INTRO}{verb} `{path}`.", ToolCall(new_id, tool, {"path": path})
    if low.startswith("write "):
        path, _, content = stripped[6:].strip().partition(" ")
        return (f"{INTRO}Writing `{path}`.",
                ToolCall(new_id, "file_write", {"path": path, "content": content}))
    if low.startswith("ask "):
        question, *choices = [p.strip() for p in stripped[4:].split("|")]
        args: dict[str, object] = {"question": question}
        if choices:
            args["choices"] = [c for c in choices if c]
        return f"{INTRO}I have a question for you.", ToolCall(new_id, "ask_user", args)
    if low.startswith("escalate ") and stripped[9:].strip():
        summary, _, context = (p.strip() for p in stripped[9:].partition("|"))
        esc: dict[str, object] = {"summary": summary, "urgency": "high"}
        if context:
            esc["context"] = context
        return (f"{INTRO}This needs your decision.",
                ToolCall(new_id, "escalate_to_human", esc))
    if low == "plan":
        return f"{INTRO}Here is a plan.", ToolCall(new_id, "todo", {"entries": DEMO_PLAN})
    return (
        f"{INTRO}Hello! I am acpgate's offline demo model (no language model is connected). "
        f"You said: {stripped}\n\n{NEWCOMER_TIP}",
        None,
    )


class DemoProvider:
    """Deterministic offline model; ``chunk_delay`` paces its streamed chunks."""

    name = "demo"
    #: The slash commands it advertises (``/help`` lists them).
    commands: tuple[SlashCommand, ...] = COMMANDS

    def __init__(self, model: str = "demo", *, chunk_delay: float = 0.01) -> None:
        self.model = model
        self._delay = chunk_delay

    async def aclose(self) -> None:
        """Nothing to release."""

    async def stream(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> AsyncIterator[ProviderEvent]:
        """Answer the newest message by the rules in the module docstring."""
        last = messages[-1] if messages else Message(role="user", text="")
        call: ToolCall | None = None
        if last.role == "tool":
            output = last.text
            if len(output) > _RESULT_PREVIEW:
                output = output[:_RESULT_PREVIEW] + "\n… (truncated)"
            # Same turn as the introduction: continue it as a new paragraph.
            text = f"\n\nThe `{last.tool_name or 'tool'}` tool returned:\n\n{output}"
            thought = "A tool finished; I will report its result."
        else:
            text, call = _plan_for(last.text)
            thought = f"The user wrote {len(last.text)} characters."
            if call is not None and call.name not in {t.name for t in tools}:
                text = (f"{INTRO}The `{call.name}` tool is not available in this session "
                        "(read-only autonomy), so I cannot do that.")
                call = None
        yield ThoughtDelta(thought)
        for piece in _chunks(text):
            if self._delay:
                await asyncio.sleep(self._delay)
            yield TextDelta(piece)
        if call is not None:
            yield ToolCallReady(call)
        in_chars = len(system) + sum(m.size() for m in messages)
        yield UsageReport(input_tokens=max(1, in_chars // 4), output_tokens=max(1, len(text) // 4))
        yield StreamDone(STOP_TOOL_USE if call is not None else STOP_END_TURN)
