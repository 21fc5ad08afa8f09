"""OpenAI-compatible chat-completions provider (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from services.agent.conversation import Message, ToolCall
from services.agent.providers.base import (
    STOP_TOOL_USE,
    ProviderEvent,
    StreamDone,
    TextDelta,
    ThoughtDelta,
    ToolCallReady,
    ToolSpec,
    UsageReport,
)
from services.agent.providers.http import RetryPolicy
from services.agent.providers.stream import SentError, SseProvider, StreamReader
from services.agent.tools.args import parse_arguments
from services.common.protocol import STOP_END_TURN, STOP_MAX_TOKENS

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: finish_reason → the ACP stop reason, or STOP_TOOL_USE.
_FINISH = {"stop": STOP_END_TURN, "tool_calls": STOP_TOOL_USE, "function_call": STOP_TOOL_USE,
           "length": STOP_MAX_TOKENS}


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation in chat-completions form."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for msg in messages:
        if msg.role == "user":
            out.append({"role": "user", "content": msg.text})
        elif msg.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": msg.text or None}
            if msg.tool_calls:
                item["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name,
                                  "arguments": orjson.dumps(c.arguments).decode()}}
                    for c in msg.tool_calls
                ]
            out.append(item)
        else:
            out.append({"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.text})
    return out


class _Reader(StreamReader):
    """One chat completion: tool-call fragments are joined per index until the end."""

    end_data = "[DONE]"

    def __init__(self) -> None:
        self.calls: dict[int, _PartialCall] = {}
        self.stop = STOP_END_TURN

    def on_event(self, event: str, payload: dict[str, Any]) -> Iterator[ProviderEvent]:
        """Usage, reasoning, text and tool-call fragments of one chunk."""
        if "error" in payload:
            raise SentError(payload["error"])
        usage = payload.get("usage")
        if isinstance(usage, dict):
            yield UsageReport(int(usage.get("prompt_tokens") or 0),
                              int(usage.get("completion_tokens") or 0))
        for choice in payload.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                yield ThoughtDelta(reasoning)
            content = delta.get("content")
            if isinstance(content, str) and content:
                yield TextDelta(content)
            for frag in delta.get("tool_calls") or []:
                part = self.calls.setdefault(int(frag.get("index", len(self.calls))),
                                             _PartialCall())
                if frag.get("id"):
                    part.id = frag["id"]
                fn = frag.get("function") or {}
                if fn.get("name"):
                    part.name += fn["name"]
                if fn.get("arguments"):
                    part.arguments.append(fn["arguments"])
            if choice.get("finish_reason"):
                self.stop = _FINISH.get(choice["finish_reason"], STOP_END_TURN)

    def finish(self) -> Iterator[ProviderEvent]:
        """The joined tool calls in index order, then the stop reason."""
        for index in sorted(self.calls):
            part = self.calls[index]
            yield ToolCallReady(ToolCall(id=part.id or f"call_{index}", name=part.name,
                                         arguments=parse_arguments("".join(part.arguments))))
        yield StreamDone(STOP_TOOL_USE if self.calls else self.stop)


class OpenAIProvider(SseProvider):
    """Streams ``POST {base_url}/chat/completions`` with tools."""

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str = "",
        base_url: str = "",
        timeout_secs: float = 120.0,
        retry: RetryPolicy | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(model, (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions",
                         api_key=api_key, timeout_secs=timeout_secs, retry=retry, client=client)

    def request_body(self, system: str, messages: list[Message],
                     tools: list[ToolSpec]) -> dict[str, Any]:
        """A streaming chat completion that reports usage at the end."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(system, messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description,
                              "parameters": t.parameters}}
                for t in tools
            ]
        return body

    def request_headers(self) -> dict[str, str]:
        """Bearer authentication when a key is configured (local servers need none)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_reader(self) -> StreamReader:
        """A reader for one chat completion."""
        return _Reader()
