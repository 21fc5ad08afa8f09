"""Anthropic provider against a real local HTTP server speaking Messages-API stream events."""

from __future__ import annotations

import pytest

from services.agent.conversation import Message, ToolCall
from services.agent.providers.anthropic import API_VERSION, AnthropicProvider
from services.agent.providers.base import (
    ProviderError,
    StreamDone,
    TextDelta,
    ThoughtDelta,
    ToolCallReady,
    ToolSpec,
    UsageReport,
)
from services.agent.providers.http import RetryPolicy
from tests.agent.fake_http import FakeProviderServer, anthropic_sse, json_reply

KEY = "sk-ant-api03-SECRETSECRET0123456789"
FAST = RetryPolicy(max_retries=2, backoff_base=0.01)
TOOLS = [ToolSpec("file_read", "read", {"type": "object"})]


def start(input_tokens: int = 10) -> dict:
    return {"type": "message_start",
            "message": {"id": "m1", "role": "assistant", "content": [],
                        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}


def text_block(index: int, *pieces: str) -> list[dict]:
    evs = [{"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}]
    evs += [{"type": "content_block_delta", "index": index,
             "delta": {"type": "text_delta", "text": p}} for p in pieces]
    evs.append({"type": "content_block_stop", "index": index})
    return evs


def stop(reason: str, output_tokens: int) -> list[dict]:
    return [{"type": "message_delta", "delta": {"stop_reason": reason},
             "usage": {"output_tokens": output_tokens}},
            {"type": "message_stop"}]


async def collect(p: AnthropicProvider, messages: list[Message]) -> list:
    try:
        return [e async for e in p.stream("SYS", messages, TOOLS)]
    finally:
        await p.aclose()


async def test_plain_stream() -> None:
    reply = anthropic_sse(start(12), {"type": "ping"}, *text_block(0, "Hi ", "there"),
                          *stop("end_turn", 5))
    async with FakeProviderServer([reply]) as srv:
        events = await collect(AnthropicProvider("claude-x", api_key=KEY, base_url=srv.url,
                                                 retry=FAST), [Message("user", "hello")])
        req = srv.requests[0]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi ", "there"]
    assert UsageReport(12, 5) in events
    assert events[-1] == StreamDone("end_turn")
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == KEY
    assert req.headers["anthropic-version"] == API_VERSION
    assert req.body["system"] == "SYS" and req.body["stream"] is True
    assert req.body["messages"] == [{"role": "user", "content": [{"type": "text",
                                                                  "text": "hello"}]}]
    assert req.body["tools"] == [{"name": "file_read", "description": "read",
                                  "input_schema": {"type": "object"}}]


async def test_tool_use_round_trip() -> None:
    first = anthropic_sse(
        start(), *text_block(0, "Let me look."),
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "file_read", "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": "th\": \"a.txt\"}"}},
        {"type": "content_block_stop", "index": 1},
        *stop("tool_use", 20))
    second = anthropic_sse(start(), *text_block(0, "It says hi."), *stop("end_turn", 4))
    async with FakeProviderServer([first, second]) as srv:
        p = AnthropicProvider("c", base_url=srv.url + "/v1", retry=FAST)
        events = [e async for e in p.stream("", [Message("user", "read a.txt")], TOOLS)]
        calls = [e.call for e in events if isinstance(e, ToolCallReady)]
        assert calls == [ToolCall("toolu_1", "file_read", {"path": "a.txt"})]
        assert events[-1] == StreamDone("tool_use")
        convo = [Message("user", "read a.txt"), Message("assistant", "Let me look.", calls),
                 Message("tool", "hi", tool_call_id="toolu_1", tool_name="file_read")]
        events2 = await collect(p, convo)
        sent = srv.requests[1].body["messages"]
        assert srv.requests[1].path == "/v1/messages"
    assert [e.text for e in events2 if isinstance(e, TextDelta)] == ["It says hi."]
    assert sent[1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "file_read", "input": {"path": "a.txt"}}]}
    assert sent[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi"}]}


async def test_thinking_blocks_become_thoughts() -> None:
    reply = anthropic_sse(
        start(),
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "Consider "}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "options."}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "signature_delta", "signature": "abc"}},
        {"type": "content_block_stop", "index": 0},
        *text_block(1, "Answer."), *stop("end_turn", 9))
    async with FakeProviderServer([reply]) as srv:
        events = await collect(AnthropicProvider("c", base_url=srv.url, retry=FAST),
                               [Message("user", "q")])
    assert [e.text for e in events if isinstance(e, ThoughtDelta)] == ["Consider ", "options."]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Answer."]


async def test_429_and_529_are_retried() -> None:
    replies = [json_reply(429, {"type": "error", "error": {"type": "rate_limit_error",
                                                            "message": "slow"}}),
               json_reply(529, {"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "busy"}}),
               anthropic_sse(start(), *text_block(0, "ok"), *stop("end_turn", 1))]
    async with FakeProviderServer(replies) as srv:
        events = await collect(AnthropicProvider("c", base_url=srv.url, retry=FAST),
                               [Message("user", "q")])
        assert len(srv.requests) == 3
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"]


async def test_error_scrubbing() -> None:
    body = {"type": "error", "error": {"type": "authentication_error",
                                       "message": f"invalid x-api-key: {KEY}"}}
    async with FakeProviderServer([json_reply(401, body)]) as srv:
        with pytest.raises(ProviderError) as info:
            await collect(AnthropicProvider("c", api_key=KEY, base_url=srv.url, retry=FAST),
                          [Message("user", "q")])
    assert "401" in str(info.value) and KEY not in str(info.value)
    assert "SECRETSECRET" not in str(info.value)


async def test_error_event_mid_stream() -> None:
    reply = anthropic_sse(start(), {"type": "error",
                                    "error": {"type": "overloaded_error", "message": "Overloaded"}})
    async with FakeProviderServer([reply]) as srv:
        with pytest.raises(ProviderError, match="Overloaded"):
            await collect(AnthropicProvider("c", base_url=srv.url, retry=FAST),
                          [Message("user", "q")])


async def test_consecutive_user_turns_are_merged() -> None:
    from services.agent.providers.anthropic import to_anthropic_messages

    msgs = [Message("user", "a"), Message("assistant", "", [ToolCall("t1", "x", {})]),
            Message("tool", "r", tool_call_id="t1"), Message("user", "b")]
    out = to_anthropic_messages(msgs)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["type"] for b in out[2]["content"]] == ["tool_result", "text"]


async def test_connection_refused_is_clean_error() -> None:
    async with FakeProviderServer([]) as srv:
        url = srv.url
    with pytest.raises(ProviderError, match="connection failed"):
        await collect(AnthropicProvider("c", api_key=KEY, base_url=url,
                                        retry=RetryPolicy(max_retries=1, backoff_base=0.01)),
                      [Message("user", "q")])


async def test_whitespace_only_text_is_never_sent_as_a_text_block() -> None:
    from services.agent.providers.anthropic import to_anthropic_messages

    out = to_anthropic_messages([Message("user", "\t"), Message("assistant", "  "),
                                 Message("user", ""), Message("assistant", " ok ")])
    texts = [b["text"] for m in out for b in m["content"]]
    assert texts == ['(a message of only whitespace: "\\t")', "(empty)", " ok "]
    assert [m["role"] for m in out] == ["user", "assistant"]
