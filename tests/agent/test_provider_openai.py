"""OpenAI-compatible provider against a real local HTTP server speaking its SSE wire format."""

from __future__ import annotations

import pytest

from services.agent.conversation import Message, ToolCall
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
from services.agent.providers.openai import OpenAIProvider
from tests.agent.fake_http import FakeProviderServer, Reply, json_reply, sse

KEY = "sk-test-SECRET-0123456789abcdef"
FAST = RetryPolicy(max_retries=2, backoff_base=0.01)
TOOLS = [ToolSpec("shell", "run", {"type": "object", "properties": {"command": {"type": "string"}}})]


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def collect(provider: OpenAIProvider, messages: list[Message]) -> list:
    try:
        return [e async for e in provider.stream("SYS", messages, TOOLS)]
    finally:
        await provider.aclose()


async def test_plain_stream_text_and_usage() -> None:
    reply = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
                chunk({"content": "lo"}), chunk({}, "stop"),
                {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}},
                done=True)
    async with FakeProviderServer([reply]) as srv:
        p = OpenAIProvider("gpt-x", api_key=KEY, base_url=srv.url + "/v1", retry=FAST)
        events = await collect(p, [Message("user", "hi")])
        req = srv.requests[0]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert UsageReport(11, 2) in events
    assert events[-1] == StreamDone("end_turn")
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["model"] == "gpt-x" and req.body["stream"] is True
    assert req.body["messages"] == [{"role": "system", "content": "SYS"},
                                    {"role": "user", "content": "hi"}]
    assert req.body["tools"][0]["function"]["name"] == "shell"


async def test_tool_call_fragments_and_round_trip() -> None:
    first = sse(
        chunk({"tool_calls": [{"index": 0, "id": "call_A", "type": "function",
                               "function": {"name": "shell", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"comm"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "and\": \"ls\"}"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_B",
                               "function": {"name": "shell", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"), done=True)
    second = sse(chunk({"content": "done"}), chunk({}, "stop"), done=True)
    async with FakeProviderServer([first, second]) as srv:
        p = OpenAIProvider("m", base_url=srv.url, retry=FAST)
        events = [e async for e in p.stream("", [Message("user", "go")], TOOLS)]
        calls = [e.call for e in events if isinstance(e, ToolCallReady)]
        assert calls == [ToolCall("call_A", "shell", {"command": "ls"}),
                         ToolCall("call_B", "shell", {})]
        assert events[-1] == StreamDone("tool_use")
        convo = [Message("user", "go"), Message("assistant", "", calls),
                 Message("tool", "out-A", tool_call_id="call_A", tool_name="shell"),
                 Message("tool", "out-B", tool_call_id="call_B", tool_name="shell")]
        events2 = await collect(p, convo)
        sent = srv.requests[1].body["messages"]
    assert "authorization" not in srv.requests[0].headers  # no key configured
    assert [e.text for e in events2 if isinstance(e, TextDelta)] == ["done"]
    assert sent[:2] == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "go"}]
    assert sent[2]["role"] == "assistant"
    assert sent[2]["tool_calls"][0] == {"id": "call_A", "type": "function",
                                        "function": {"name": "shell",
                                                     "arguments": "{\"command\":\"ls\"}"}}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_A", "content": "out-A"}
    assert sent[4] == {"role": "tool", "tool_call_id": "call_B", "content": "out-B"}


async def test_reasoning_deltas_both_spellings() -> None:
    reply = sse(chunk({"reasoning_content": "think-1 "}), chunk({"reasoning": "think-2"}),
                chunk({"content": "answer"}), chunk({}, "stop"), done=True)
    async with FakeProviderServer([reply]) as srv:
        events = await collect(OpenAIProvider("m", base_url=srv.url, retry=FAST),
                               [Message("user", "q")])
    assert [e.text for e in events if isinstance(e, ThoughtDelta)] == ["think-1 ", "think-2"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["answer"]


async def test_429_then_success_is_retried() -> None:
    replies = [json_reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}),
               json_reply(503, {"error": {"message": "overloaded"}}),
               sse(chunk({"content": "ok"}), chunk({}, "stop"), done=True)]
    async with FakeProviderServer(replies) as srv:
        events = await collect(OpenAIProvider("m", base_url=srv.url, retry=FAST),
                               [Message("user", "q")])
        assert len(srv.requests) == 3
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"]


async def test_retries_exhausted_gives_clean_error() -> None:
    replies = [json_reply(429, {"error": {"message": "rate limited"}})] * 3
    async with FakeProviderServer(replies) as srv:
        with pytest.raises(ProviderError) as info:
            await collect(OpenAIProvider("m", base_url=srv.url, retry=FAST),
                          [Message("user", "q")])
        assert len(srv.requests) == 3
    assert "429" in str(info.value) and "rate limited" in str(info.value)


async def test_connection_error_is_retried() -> None:
    replies = [Reply(drop=True), sse(chunk({"content": "back"}), chunk({}, "stop"), done=True)]
    async with FakeProviderServer(replies) as srv:
        events = await collect(OpenAIProvider("m", base_url=srv.url, retry=FAST),
                               [Message("user", "q")])
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["back"]


async def test_error_message_scrubs_key_and_authorization() -> None:
    body = {"error": {"message": f"Incorrect API key provided: {KEY}. "
                                 f"Header was Authorization: Bearer {KEY}"}}
    async with FakeProviderServer([json_reply(401, body)]) as srv:
        with pytest.raises(ProviderError) as info:
            await collect(OpenAIProvider("m", api_key=KEY, base_url=srv.url, retry=FAST),
                          [Message("user", "q")])
    text = str(info.value)
    assert "401" in text and "Incorrect API key" in text
    assert KEY not in text and "SECRET" not in text


async def test_error_summary_for_logs_leaves_out_the_echoed_body() -> None:
    """A provider's error body may quote the prompt: the client sees it, the log summary not."""
    body = {"error": {"message": "invalid input: 'my private prompt text'"}}
    async with FakeProviderServer([json_reply(400, body)]) as srv:
        with pytest.raises(ProviderError) as info:
            await collect(OpenAIProvider("m", api_key=KEY, base_url=srv.url, retry=FAST),
                          [Message("user", "my private prompt text")])
    assert "my private prompt text" in str(info.value)
    assert info.value.summary == "openai API error 400"


async def test_in_stream_error_event() -> None:
    reply = sse(chunk({"content": "par"}), {"error": {"message": f"boom {KEY}"}})
    async with FakeProviderServer([reply]) as srv:
        with pytest.raises(ProviderError) as info:
            await collect(OpenAIProvider("m", api_key=KEY, base_url=srv.url, retry=FAST),
                          [Message("user", "q")])
    assert "boom" in str(info.value) and KEY not in str(info.value)
