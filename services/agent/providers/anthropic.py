"""Anthropic Messages API provider (streaming events, tool_use blocks, thinking blocks)."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from services.common.protocol import STOP_END_TURN, STOP_MAX_TOKENS, STOP_REFUSAL

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192
#: Anthropic's stop_reason → the ACP stop reason, or STOP_TOOL_USE.
_STOP = {"end_turn": STOP_END_TURN, "stop_sequence": STOP_END_TURN, "tool_use": STOP_TOOL_USE,
         "max_tokens": STOP_MAX_TOKENS, "refusal": STOP_REFUSAL}


def _user_text(text: str) -> str:
    """User text the Messages API accepts: it refuses empty and whitespace-only text blocks.

    A whitespace-only prompt is a valid prompt (SPEC §4), so it is sent as a
    visible description with the exact characters JSON-escaped, never rejected.
    """
    if not text:
        return "(empty)"
    if not text.strip():
        return f"(a message of only whitespace: {orjson.dumps(text).decode()})"
    return text


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation as Messages-API turns (consecutive same-role turns merged)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for msg in messages:
        if msg.role == "user":
            add("user", [{"type": "text", "text": _user_text(msg.text)}])
        elif msg.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if msg.text.strip():  # the API refuses whitespace-only text blocks
                blocks.append({"type": "text", "text": msg.text})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in msg.tool_calls
            )
            add("assistant", blocks)
        else:
            add("user", [{"type": "tool_result", "tool_use_id": msg.tool_call_id,
                          "content": msg.text or "(no output)"}])
    return out


class AnthropicProvider:
    """Streams ``POST {base_url}/v1/messages``."""

    name = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str = "",
        base_url: str = "",
        timeout_secs: float = 120.0,
        retry: RetryPolicy | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self._api_key = api_key
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")
        self._retry = retry or RetryPolicy()
        self._max_tokens = max_tokens
        self._client = client or new_client(timeout_secs)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def stream(
        self, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> AsyncIterator[ProviderEvent]:
        """Stream one Messages call; tool input JSON is assembled per content block."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._max_tokens,
            "messages": to_anthropic_messages(messages),
            "stream": True,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION,
                   "Accept": "text/event-stream"}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        secrets = (self._api_key,)
        blocks: dict[int, dict[str, Any]] = {}
        input_tokens = output_tokens = 0
        stop = STOP_END_TURN
        saw_tool = False
        async with open_stream(self._client, "anthropic", self._url, headers, body,
                               self._retry, secrets) as response:
            try:
                async for event, data in iter_sse(response):
                    try:
                        payload = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        continue
                    if not isinstance(payload, dict):
                        continue
                    kind = payload.get("type") or event
                    if kind == "error":
                        raise stream_error("anthropic", payload.get("error") or {}, secrets)
                    if kind == "message_start":
                        usage = (payload.get("message") or {}).get("usage") or {}
                        input_tokens = int(usage.get("input_tokens") or 0)
                        output_tokens = int(usage.get("output_tokens") or 0)
                    elif kind == "content_block_start":
                        block = dict(payload.get("content_block") or {})
                        block["_json"] = []
                        blocks[int(payload.get("index", 0))] = block
                        if block.get("type") == "text" and block.get("text"):
                            yield TextDelta(block["text"])
                        elif block.get("type") == "thinking" and block.get("thinking"):
                            yield ThoughtDelta(block["thinking"])
                    elif kind == "content_block_delta":
                        delta = payload.get("delta") or {}
                        dtype = delta.get("type")
                        if dtype == "text_delta" and delta.get("text"):
                            yield TextDelta(delta["text"])
                        elif dtype == "thinking_delta" and delta.get("thinking"):
                            yield ThoughtDelta(delta["thinking"])
                        elif dtype == "input_json_delta":
                            blk = blocks.setdefault(int(payload.get("index", 0)),
                                                    {"type": "tool_use", "_json": []})
                            blk["_json"].append(delta.get("partial_json") or "")
                    elif kind == "content_block_stop":
                        blk = blocks.pop(int(payload.get("index", 0)), {})
                        if blk and blk.get("type") == "tool_use":
                            saw_tool = True
                            raw = "".join(blk["_json"])
                            args = parse_arguments(raw) if raw else dict(blk.get("input") or {})
                            yield ToolCallReady(ToolCall(id=str(blk.get("id") or ""),
                                                         name=str(blk.get("name") or ""),
                                                         arguments=args))
                    elif kind == "message_delta":
                        delta = payload.get("delta") or {}
                        if delta.get("stop_reason"):
                            stop = _STOP.get(delta["stop_reason"], STOP_END_TURN)
                        usage = payload.get("usage") or {}
                        if usage.get("output_tokens") is not None:
                            output_tokens = int(usage["output_tokens"])
                        if usage.get("input_tokens"):
                            input_tokens = int(usage["input_tokens"])
                    elif kind == "message_stop":
                        break
            except httpx.HTTPError as exc:
                raise stream_interrupted("anthropic", exc, secrets) from None
        yield UsageReport(input_tokens, output_tokens)
        yield StreamDone(STOP_TOOL_USE if saw_tool else stop)
