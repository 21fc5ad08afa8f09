"""The demo model's rules, the provider factory (API key from env), and a real provider in a turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.agent.conversation import Message
from services.agent.params import shell_environment
from services.agent.providers import make_provider
from services.agent.providers.anthropic import AnthropicProvider
from services.agent.providers.base import StreamDone, TextDelta, ToolCallReady, ToolSpec
from services.agent.providers.demo import DemoProvider
from services.agent.providers.openai import OpenAIProvider
from services.common.config import AgentSection
from tests.agent.fake_http import FakeProviderServer, sse
from tests.agent.harness import make_config, running_agent

ALL = [ToolSpec(n, "", {}) for n in ("shell", "file_read", "deliver_file", "todo", "ask_user",
                                     "escalate_to_human", "file_write")]


async def demo(text: str, tools: list[ToolSpec] = ALL) -> list:
    return [e async for e in DemoProvider(chunk_delay=0).stream("", [Message("user", text)],
                                                                 tools)]


async def test_demo_rules() -> None:
    echo = await demo("hi there")
    text = "".join(e.text for e in echo if isinstance(e, TextDelta))
    assert text.startswith("[demo model] ") and "demo model" in text and "hi there" in text
    assert len([e for e in echo if isinstance(e, TextDelta)]) >= 3
    assert echo[-1] == StreamDone("end_turn")
    for prompt, tool, args in [("!ls -la", "shell", {"command": "ls -la"}),
                               ("read a/b.txt", "file_read", {"path": "a/b.txt"}),
                               ("deliver out.pdf", "deliver_file", {"path": "out.pdf"}),
                               ("ask Go? | yes | no", "ask_user",
                                {"question": "Go?", "choices": ["yes", "no"]}),
                               ("escalate Drop the table? | prod data", "escalate_to_human",
                                {"summary": "Drop the table?", "urgency": "high",
                                 "context": "prod data"})]:
        events = await demo(prompt)
        (ready,) = [e for e in events if isinstance(e, ToolCallReady)]
        assert ready.call.name == tool and ready.call.arguments == args
        assert events[-1] == StreamDone("tool_use")
    plan = [e for e in await demo("plan") if isinstance(e, ToolCallReady)]
    assert plan[0].call.name == "todo" and len(plan[0].call.arguments["entries"]) == 3
    # a tool not offered (readonly) → the demo just talks
    refused = await demo("!ls", [])
    assert not [e for e in refused if isinstance(e, ToolCallReady)]
    assert "not available" in "".join(e.text for e in refused if isinstance(e, TextDelta))
    assert refused[-1] == StreamDone("end_turn")
    after = [e async for e in DemoProvider(chunk_delay=0).stream(
        "", [Message("user", "x"), Message("tool", "RESULT", tool_call_id="t",
                                           tool_name="shell")], ALL)]
    assert "RESULT" in "".join(e.text for e in after if isinstance(e, TextDelta))
    assert after[-1] == StreamDone("end_turn")


def test_factory_reads_key_from_named_env_var() -> None:
    agent = AgentSection(alias="x", provider="openai", model="m", api_key_env="MY_KEY",
                         base_url="http://127.0.0.1:1/v1")
    provider = make_provider(agent, {"MY_KEY": "sk-from-env-123456789"})
    assert isinstance(provider, OpenAIProvider) and provider._api_key == "sk-from-env-123456789"
    anth = make_provider(AgentSection(alias="y", provider="anthropic", model="c"), {})
    assert isinstance(anth, AnthropicProvider) and anth._api_key == ""
    assert isinstance(make_provider(AgentSection(alias="z", provider="demo", model="demo")),
                      DemoProvider)


def test_shell_environment_drops_api_keys(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, api_key_env="OPENAI_API_KEY")
    env = shell_environment(cfg, {"OPENAI_API_KEY": "sk-x", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


async def test_openai_tool_round_trip_through_agent(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("file body")

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    first = sse(chunk({"reasoning_content": "need file"}),
                chunk({"tool_calls": [{"index": 0, "id": "call_1",
                                       "function": {"name": "file_read", "arguments": ""}}]}),
                chunk({"tool_calls": [{"index": 0,
                                       "function": {"arguments": "{\"path\":\"a.txt\"}"}}]}),
                chunk({}, "tool_calls"),
                {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 7}},
                done=True)
    second = sse(chunk({"content": "It says "}), chunk({"content": "file body."}),
                 chunk({}, "stop"),
                 {"choices": [], "usage": {"prompt_tokens": 150, "completion_tokens": 5}},
                 done=True)
    async with FakeProviderServer([first, second]) as srv:
        provider = OpenAIProvider("m", api_key="sk-abc-123456789", base_url=srv.url)
        async with running_agent(make_config(tmp_path), provider) as c:
            sid = await c.new_session(ws)
            result = await c.prompt(sid, "what is in a.txt?")
        sent = srv.requests[1].body["messages"]
    assert result["stopReason"] == "end_turn"
    assert result["usage"] == {"totalTokens": 262, "inputTokens": 250, "outputTokens": 12}
    assert c.kinds() == ["agent_thought_chunk", "tool_call", "tool_call_update",
                         "agent_message_chunk", "agent_message_chunk", "usage_update"]
    assert c.of("tool_call")[0]["toolCallId"] == "call_1"
    assert c.of("tool_call_update")[0]["rawOutput"] == "file body"
    assert sent[0]["role"] == "system" and str(ws) in sent[0]["content"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "file body"}
    assert c.text() == "It says file body."


async def test_cancel_stops_a_streaming_provider(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    stalled = sse({"choices": [{"index": 0, "delta": {"content": "Thinking about it"},
                                "finish_reason": None}]})
    stalled.stall = True
    async with FakeProviderServer([stalled]) as srv:
        provider = OpenAIProvider("m", base_url=srv.url)
        async with running_agent(make_config(tmp_path), provider) as c:
            sid = await c.new_session(ws)
            running = asyncio.create_task(c.prompt(sid, "long answer please"))
            await c.wait_until(lambda: bool(c.of("agent_message_chunk")))
            await c.peer.notify("session/cancel", {"sessionId": sid})
            result = await asyncio.wait_for(running, 10)
            await asyncio.wait_for(srv.client_hung_up.wait(), 10)
    assert result["stopReason"] == "cancelled"
    assert c.text() == "Thinking about it"
