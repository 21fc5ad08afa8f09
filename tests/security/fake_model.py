"""A local OpenAI-compatible model server whose "model" does what the attacker's prompt says.

The built-in agent talks to it exactly as to a real provider (HTTP, SSE,
tool calls), so the tools it runs are the real ones under the real policy.
A user message ``shell <command>`` makes the model call the shell tool with
``<command>``, ``file_read <path>`` the file_read tool, ``call <tool> <JSON
object>`` any tool with those arguments (the session tools: ``call
sessions_send {"sessionId": …, "message": …}``); a tool result is reported
back verbatim, after the marker :data:`RESULT_MARKER`; anything else is echoed.
``stream <n>`` makes the model answer in ``n`` chunks (``w0 w1 …``), and so does a tool
result holding ``STREAM <n>`` (many updates in one turn, after a wait).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.agent.fake_http import FakeProviderServer, Recorded, Reply, sse

#: Precedes a tool's output in the model's final answer.
RESULT_MARKER = "TOOL RESULT:\n"
#: The tools a prompt can ask for, and the argument the rest of the prompt fills.
_TOOLS = {"shell": "command", "file_read": "path"}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _say(text: str) -> Reply:
    return sse(_chunk({"role": "assistant", "content": text}), _chunk({}, "stop"), done=True)


def _call(tool: str, arguments: dict[str, Any]) -> Reply:
    call = {"index": 0, "id": f"call-{tool}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps(arguments)}}
    return sse(_chunk({"role": "assistant", "tool_calls": [call]}), _chunk({}, "tool_calls"),
               done=True)


def _stream(head: str, n: int) -> Reply:
    """An answer in ``n`` chunks after ``head``: ``w0 w1 …``."""
    parts = [_chunk({"role": "assistant", "content": head})]
    parts.extend(_chunk({"content": f"w{i} "}) for i in range(n))
    return sse(*parts, _chunk({}, "stop"), done=True)


def call_message(tool: str, arguments: dict[str, Any]) -> str:
    """The user message that makes the model call ``tool`` with ``arguments``."""
    return f"call {tool} {json.dumps(arguments)}"


def attacker_model(request: Recorded) -> Reply:
    """The reply to one chat-completions request (rules in the module docstring)."""
    messages = (request.body or {}).get("messages") or [{"role": "user", "content": ""}]
    last = messages[-1]
    if last.get("role") == "tool":
        output = str(last.get("content") or "")
        streamed = re.search(r"STREAM (\d+)", output)
        if streamed:
            return _stream(RESULT_MARKER, int(streamed.group(1)))
        return _say(RESULT_MARKER + output)
    text = str(last.get("content") or "")
    tool, _, argument = text.partition(" ")
    if tool == "stream" and argument.strip().isdigit():
        return _stream("", int(argument.strip()))
    if tool in _TOOLS and argument.strip():
        return _call(tool, {_TOOLS[tool]: argument.strip()})
    if tool == "call":
        name, _, raw = argument.strip().partition(" ")
        return _call(name, json.loads(raw or "{}"))
    return _say(f"echo: {text}")


def attacker_model_server() -> FakeProviderServer:
    """``async with attacker_model_server() as srv:`` — point ``base_url`` at ``srv.url + "/v1"``."""
    return FakeProviderServer([], responder=attacker_model)
