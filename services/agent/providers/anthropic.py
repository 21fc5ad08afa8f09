"""Anthropic Messages API provider (streaming events, tool_use blocks, thinking blocks)."""

from __future__ import annotations

from collections.abc import Iterator
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


class _Reader(StreamReader):
    """One Messages reply: tool input JSON is assembled per content block."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.input_tokens = self.output_tokens = 0
        self.stop = STOP_END_TURN
        self.saw_tool = False

    def on_event(self, event: str, payload: dict[str, Any]) -> Iterator[ProviderEvent]:
        """One Messages stream event (``type`` in the payload, else the SSE event name)."""
        kind = payload.get("type") or event
        if kind == "error":
            raise SentError(payload.get("error") or {})
        if kind == "message_start":
            usage = (payload.get("message") or {}).get("usage") or {}
            self.input_tokens = int(usage.get("input_tokens") or 0)
            self.output_tokens = int(usage.get("output_tokens") or 0)
        elif kind == "content_block_start":
            block = dict(payload.get("content_block") or {})
            block["_json"] = []
            self.blocks[int(payload.get("index", 0))] = block
            if block.get("type") == "text" and block.get("text"):
                yield TextDelta(block["text"])
            elif block.get("type") == "thinking" and block.get("thinking"):
                yield ThoughtDelta(block["thinking"])
        elif kind == "content_block_delta":
            yield from self._delta(payload)
        elif kind == "content_block_stop":
            blk = self.blocks.pop(int(payload.get("index", 0)), {})
            if blk and blk.get("type") == "tool_use":
                self.saw_tool = True
                raw = "".join(blk["_json"])
                args = parse_arguments(raw) if raw else dict(blk.get("input") or {})
                yield ToolCallReady(ToolCall(id=str(blk.get("id") or ""),
                                             name=str(blk.get("name") or ""), arguments=args))
        elif kind == "message_delta":
            delta = payload.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop = _STOP.get(delta["stop_reason"], STOP_END_TURN)
            usage = payload.get("usage") or {}
            if usage.get("output_tokens") is not None:
                self.output_tokens = int(usage["output_tokens"])
            if usage.get("input_tokens"):
                self.input_tokens = int(usage["input_tokens"])
        elif kind == "message_stop":
            self.done = True

    def _delta(self, payload: dict[str, Any]) -> Iterator[ProviderEvent]:
        delta = payload.get("delta") or {}
        dtype = delta.get("type")
        if dtype == "text_delta" and delta.get("text"):
            yield TextDelta(delta["text"])
        elif dtype == "thinking_delta" and delta.get("thinking"):
            yield ThoughtDelta(delta["thinking"])
        elif dtype == "input_json_delta":
            blk = self.blocks.setdefault(int(payload.get("index", 0)),
                                         {"type": "tool_use", "_json": []})
            blk["_json"].append(delta.get("partial_json") or "")

    def finish(self) -> Iterator[ProviderEvent]:
        """Usage (known only at the end), then the stop reason."""
        yield UsageReport(self.input_tokens, self.output_tokens)
        yield StreamDone(STOP_TOOL_USE if self.saw_tool else self.stop)


class AnthropicProvider(SseProvider):
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
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        super().__init__(model, base + ("/messages" if base.endswith("/v1") else "/v1/messages"),
                         api_key=api_key, timeout_secs=timeout_secs, retry=retry, client=client)
        self._max_tokens = max_tokens

    def request_body(self, system: str, messages: list[Message],
                     tools: list[ToolSpec]) -> dict[str, Any]:
        """A streaming Messages call; the system prompt is a top-level field."""
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
        return body

    def request_headers(self) -> dict[str, str]:
        """The API version, and the key when one is configured."""
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def new_reader(self) -> StreamReader:
        """A reader for one Messages reply."""
        return _Reader()
