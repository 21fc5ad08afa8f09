"""OpenAI-compatible chat-completions provider (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp)."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from services.agent.providers.http import (
    RetryPolicy,
    iter_sse,
    new_client,
    open_stream,
    stream_error,
    stream_interrupted,
)
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


class OpenAIProvider:
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
        self.model = model
        self._api_key = api_key
        self._url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        self._retry = retry or RetryPolicy()
        self._client = client or new_client(timeout_secs)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def stream(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> AsyncIterator[ProviderEvent]:
        """Stream one chat completion; tool-call fragments are joined per index."""
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
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        secrets = (self._api_key,)
        calls: dict[int, _PartialCall] = {}
        stop = STOP_END_TURN
        async with open_stream(self._client, "openai", self._url, headers, body,
                               self._retry, secrets) as response:
            try:
                async for _event, data in iter_sse(response):
                    if data.strip() == "[DONE]":
                        break
                    try:
                        chunk = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        continue  # keep-alive noise some servers send
                    if not isinstance(chunk, dict):
                        continue
                    if "error" in chunk:
                        raise stream_error("openai", chunk["error"], secrets)
                    usage = chunk.get("usage")
                    if isinstance(usage, dict):
                        yield UsageReport(int(usage.get("prompt_tokens") or 0),
                                          int(usage.get("completion_tokens") or 0))
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if isinstance(reasoning, str) and reasoning:
                            yield ThoughtDelta(reasoning)
                        content = delta.get("content")
                        if isinstance(content, str) and content:
                            yield TextDelta(content)
                        for frag in delta.get("tool_calls") or []:
                            part = calls.setdefault(int(frag.get("index", len(calls))),
                                                    _PartialCall())
                            if frag.get("id"):
                                part.id = frag["id"]
                            fn = frag.get("function") or {}
                            if fn.get("name"):
                                part.name += fn["name"]
                            if fn.get("arguments"):
                                part.arguments.append(fn["arguments"])
                        if choice.get("finish_reason"):
                            stop = _FINISH.get(choice["finish_reason"], STOP_END_TURN)
            except httpx.HTTPError as exc:
                raise stream_interrupted("openai", exc, secrets) from None
        for index in sorted(calls):
            part = calls[index]
            yield ToolCallReady(ToolCall(id=part.id or f"call_{index}", name=part.name,
                                         arguments=parse_arguments("".join(part.arguments))))
        if calls:
            stop = STOP_TOOL_USE
        yield StreamDone(stop)
