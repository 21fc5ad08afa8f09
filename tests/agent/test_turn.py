"""The turn loop through the real ACP server: update shapes, limits, trimming, restore, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.agent.conversation import Message, ToolCall, trim_to_budget
from services.agent.providers.base import ProviderError, ThoughtDelta
from services.common.jsonrpc import JsonRpcError
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say


async def test_demo_echo_streams_chunks_and_reports_usage(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "hello there friend")
    assert result["stopReason"] == "end_turn"
    usage = result["usage"]  # ACP's (unstable) PromptResponse.usage
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    assert "_meta" not in result
    assert "content" not in result
    assert len(c.of("agent_message_chunk")) >= 3
    # The demo model's commands, advertised after session/new, then the turn's updates.
    assert c.kinds()[:2] == ["available_commands_update", "agent_thought_chunk"]
    assert "demo model" in c.text() and "hello there friend" in c.text()
    assert all(u["sessionId"] == sid for u in c.updates)


async def test_shell_tool_update_shapes_exact(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path, autonomy="full")) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "!echo hi")
    assert result["stopReason"] == "end_turn"
    (opened,) = c.of("tool_call")
    (closed,) = c.of("tool_call_update")
    assert opened == {"sessionUpdate": "tool_call", "toolCallId": opened["toolCallId"],
                      "name": "shell", "title": "shell", "kind": "execute",
                      "status": "pending", "rawInput": {"command": "echo hi"}}
    assert closed == {"sessionUpdate": "tool_call_update", "toolCallId": opened["toolCallId"],
                      "status": "completed", "name": "shell", "title": "shell",
                      "kind": "execute", "rawOutput": "exit code 0\nhi", "body": "exit code 0\nhi",
                      "content": [{"type": "content",
                                   "content": {"type": "text", "text": "exit code 0\nhi"}}]}
    assert c.kinds().index("tool_call") < c.kinds().index("tool_call_update")
    assert "exit code 0" in c.text()  # the demo reports the tool result


async def test_file_write_carries_diff_content(tmp_path: Path, ws: Path) -> None:
    (ws / "old.txt").write_text("before")
    async with running_agent(make_config(tmp_path, autonomy="full")) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "write new.txt hello world")
        await c.prompt(sid, "write old.txt after")
    first, second = c.of("tool_call")
    path = str(ws / "new.txt")
    assert first["kind"] == "edit" and first["name"] == "file_write"
    assert first["rawInput"] == {"path": path, "oldText": None, "newText": "hello world"}
    assert first["content"] == [{"type": "diff", "path": path, "oldText": None,
                                 "newText": "hello world"}]
    assert second["rawInput"]["oldText"] == "before" and second["rawInput"]["newText"] == "after"
    assert (ws / "new.txt").read_text() == "hello world"
    assert (ws / "old.txt").read_text() == "after"


async def test_file_edit_diff_and_plan_update(tmp_path: Path, ws: Path) -> None:
    (ws / "f.py").write_text("x = 1\ny = 2\n")
    provider = ScriptedProvider([
        call("file_edit", {"path": "f.py", "old_string": "y = 2", "new_string": "y = 3"}),
        call("todo", {"entries": [{"content": "edit", "status": "completed"},
                                  {"content": "test", "priority": "high"}]}, call_id="c2"),
        say("done"),
    ])
    async with running_agent(make_config(tmp_path, autonomy="full"), provider) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "go")
    assert result["stopReason"] == "end_turn"
    edit = c.of("tool_call")[0]
    assert edit["kind"] == "edit"
    assert edit["content"] == [{"type": "diff", "path": str(ws / "f.py"),
                                "oldText": "x = 1\ny = 2\n", "newText": "x = 1\ny = 3\n"}]
    assert (ws / "f.py").read_text() == "x = 1\ny = 3\n"
    (plan,) = c.of("plan")
    assert plan == {"sessionUpdate": "plan", "entries": [
        {"content": "edit", "priority": "medium", "status": "completed"},
        {"content": "test", "priority": "high", "status": "pending"}]}
    todo_call = c.of("tool_call")[1]
    assert todo_call["kind"] == "other" and todo_call["name"] == "todo"


async def test_max_tool_iterations_stops_with_max_turn_requests(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("glob", {"pattern": "*"})])
    cfg = make_config(tmp_path, max_tool_iterations=3)
    async with running_agent(cfg, provider) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "loop forever")
    assert result["stopReason"] == "max_turn_requests"
    assert len(provider.calls) == 3
    ids = [u["toolCallId"] for u in c.of("tool_call")]
    assert len(ids) == 3 and len(set(ids)) == 3  # repeated provider ids made unique
    assert all(u["status"] == "completed" for u in c.of("tool_call_update"))


async def test_failing_tool_goes_back_to_model_and_turn_continues(tmp_path: Path,
                                                                  ws: Path) -> None:
    provider = ScriptedProvider([call("file_read", {"path": "missing.txt"}), say("sorry")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "read it")
    assert result["stopReason"] == "end_turn"
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "not found" in update["rawOutput"]
    tool_msg = provider.calls[1][1][-1]
    assert tool_msg.role == "tool" and "not found" in tool_msg.text


async def test_unknown_tool_and_bad_arguments_fail_cleanly(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([
        call("no_such_tool", {}),
        call("file_read", {"_unparsed_arguments": "{oops"}, call_id="c2"),
        say("ok"),
    ])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        result = await c.prompt(sid, "x")
    assert result["stopReason"] == "end_turn"
    first, second = c.of("tool_call_update")
    assert first["status"] == "failed" and "Unknown tool" in first["rawOutput"]
    assert second["status"] == "failed" and "not valid JSON" in second["rawOutput"]


def test_trim_keeps_tool_call_with_result() -> None:
    msgs = [Message("user", "a" * 100),
            Message("assistant", "", [ToolCall("t1", "shell", {"command": "x"})]),
            Message("tool", "r" * 100, tool_call_id="t1"),
            Message("user", "b" * 10), Message("assistant", "c" * 10),
            Message("user", "now")]
    assert trim_to_budget(msgs, 10_000) == msgs
    trimmed = trim_to_budget(msgs, 40)
    assert trimmed == msgs[3:]
    assert trim_to_budget(msgs, 1) == msgs[5:]  # the newest turn always stays
    for cut in range(0, 400, 7):
        out = trim_to_budget(msgs, cut)
        ids = {c.id for m in out for c in m.tool_calls}
        assert all(m.tool_call_id in ids for m in out if m.role == "tool")


async def test_context_budget_applies_to_model_calls(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([say("ok")])
    cfg = make_config(tmp_path, context_budget_chars=50)
    history = [{"role": "user", "text": "old " * 40}, {"role": "assistant", "text": "x" * 30},
               {"role": "user", "text": "mid"}, {"role": "assistant", "text": "y"}]
    async with running_agent(cfg, provider) as c:
        await c.call("session/resume", {"sessionId": "s-1", "cwd": str(ws),
                                        "_meta": {"acpgate": {"history": history}}})
        await c.prompt("s-1", "new question")
    sent = provider.calls[0][1]
    assert [m.text for m in sent] == ["mid", "y", "new question"]


async def test_resume_seeds_history_and_load_replays(tmp_path: Path, ws: Path) -> None:
    history = [
        {"role": "user", "text": "list files"},
        {"role": "thought", "text": "hmm"},
        {"role": "assistant", "text": "Listing."},
        {"role": "tool_call", "toolCallId": "tc-9", "toolName": "glob", "toolKind": "search",
         "arguments": {"pattern": "*"}},
        {"role": "tool_result", "toolCallId": "tc-9", "toolName": "glob", "output": "a.txt",
         "status": "completed"},
        {"role": "assistant", "text": "One file."},
        {"role": "tool_call", "toolCallId": "tc-orphan", "toolName": "shell"},
        {"role": "tool_result", "toolCallId": "nobody", "output": "stray"},
        "garbage",
    ]
    provider = ScriptedProvider([say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        meta = {"_meta": {"acpgate": {"history": history}}}
        assert set(await c.call("session/resume", {"sessionId": "abc", "cwd": str(ws),
                                                 **meta})) == {"modes", "configOptions"}
        assert c.updates == []  # resume does not replay
        await c.prompt("abc", "and now?")
        sent = provider.calls[0][1]
        assert [m.role for m in sent] == ["user", "assistant", "tool", "assistant", "tool",
                                          "user"]
        assert sent[1].text == "Listing." and sent[1].tool_calls[0].id == "tc-9"
        assert sent[3].text == "One file." and sent[3].tool_calls[0].id == "tc-orphan"
        assert sent[4].tool_call_id == "tc-orphan"  # placeholder result, never a dangling call
        c.updates.clear()
        assert set(await c.call("session/load", {"sessionId": "fresh", "cwd": str(ws),
                                                 "mcpServers": [], **meta})) \
            == {"modes", "configOptions"}
        kinds = c.kinds()
        assert kinds[:5] == ["user_message_chunk", "agent_message_chunk", "tool_call",
                             "tool_call_update", "agent_message_chunk"]
        replayed_call = c.of("tool_call")[0]
        assert replayed_call["status"] == "completed" and replayed_call["kind"] == "search"
        assert all(u["sessionId"] == "fresh" for u in c.updates)


async def test_unknown_id_without_history_is_session_not_found(tmp_path: Path, ws: Path) -> None:
    """A restarted standalone agent must not pass an empty session off as the real one."""
    provider = ScriptedProvider([say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        for method in ("session/load", "session/resume"):
            metas: list[dict[str, Any]] = [{}, {"_meta": {"acpgate": {"policy": None}}},
                                           {"_meta": {}}]
            for meta in metas:
                with pytest.raises(JsonRpcError) as info:
                    await c.call(method, {"sessionId": "plain", "cwd": str(ws),
                                          "mcpServers": [], **meta})
                assert info.value.code == -32000
                assert info.value.message == "Session not found: plain"
        assert c.updates == []
        with pytest.raises(JsonRpcError) as info:  # nothing was created under that id
            await c.prompt("plain", "hi")
        assert info.value.code == -32000
        with pytest.raises(JsonRpcError) as info:
            await c.call("session/resume", {"sessionId": "bad", "cwd": str(ws),
                                            "_meta": {"acpgate": {"history": {"x": 1}}}})
        assert info.value.code == -32602 and "history" in info.value.message
        # The edge seeding a session with no turns yet: an empty history list.
        assert set(await c.call("session/resume", {"sessionId": "seeded", "cwd": str(ws),
                                                   "_meta": {"acpgate": {"history": []}}})) \
            == {"modes", "configOptions"}
        assert (await c.prompt("seeded", "hi"))["stopReason"] == "end_turn"
        # Ids this process knows can be resumed and loaded without history.
        c.updates.clear()
        sid = await c.new_session(ws)
        for method in ("session/resume", "session/load"):
            assert set(await c.call(method, {"sessionId": sid, "cwd": str(ws)})) \
                == {"modes", "configOptions"}
        assert [u["update"]["sessionUpdate"] for u in c.updates] == []
    assert [m.text for m in provider.calls[0][1]] == ["hi"]


async def test_initialize_does_not_advertise_load_without_a_store(tmp_path: Path) -> None:
    async with running_agent(make_config(tmp_path)) as c:
        init = await c.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    caps = init["agentCapabilities"]
    assert caps["loadSession"] is False
    assert caps["sessionCapabilities"] == {"resume": {}, "close": {}}


async def test_policy_from_meta_is_used(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("shell", {"command": "echo hi"}), say("done")])
    policy = {"workspaceDir": str(ws), "autonomy": "readonly"}
    async with running_agent(make_config(tmp_path, autonomy="full"), provider) as c:
        sid = await c.new_session(ws, policy=policy)
        await c.prompt(sid, "run")
        with pytest.raises(JsonRpcError) as info:
            await c.new_session(ws, policy={"autonomy": "full"})
    assert info.value.code == -32602 and "policy" in info.value.message
    offered = {t.name for t in provider.calls[0][2]}
    assert "shell" not in offered and "file_write" not in offered and "file_read" in offered
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "readonly" in update["rawOutput"]
    assert "denied by the session policy" in update["rawOutput"]


async def test_system_prompt_has_identity_soul_and_workspace(tmp_path: Path, ws: Path) -> None:
    cfg = make_config(tmp_path)
    home = cfg.agent_workspace("a")
    home.mkdir(parents=True)
    (home / "IDENTITY.md").write_text("I am Ada.")
    (home / "SOUL.md").write_text("Be kind.")
    provider = ScriptedProvider([say("ok")])
    async with running_agent(cfg, provider) as c:
        sid = await c.new_session(ws)
        await c.prompt(sid, "hi")
        sid2 = await c.call("session/new", {"mcpServers": []})
        await c.prompt(sid2["sessionId"], "hi")
    system = provider.calls[0][0]
    assert "I am Ada." in system and "Be kind." in system
    assert f"Working directory: {ws}" in system
    assert "memory" not in {t.name for t in provider.calls[0][2]}
    assert f"Working directory: {home.resolve()}" in provider.calls[1][0]


async def test_request_errors(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([[ThoughtDelta("...")]], hang=True)
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        cases: list[tuple[dict[str, Any], int]] = [
            ({"prompt": "x"}, -32602),
            ({"sessionId": "nope", "prompt": "x"}, -32000),
            ({"sessionId": sid}, -32602),
            ({"sessionId": sid, "prompt": []}, -32602),
            ({"sessionId": sid, "prompt": [{"type": "image", "data": "AA=="}]}, -32602),
        ]
        for params, code in cases:
            with pytest.raises(JsonRpcError) as info:
                await c.call("session/prompt", params)
            assert info.value.code == code
        with pytest.raises(JsonRpcError) as info:
            await c.call("session/new", {"cwd": str(ws / "missing")})
        assert info.value.code == -32602 and "cwd is not a usable directory" in info.value.message
        with pytest.raises(JsonRpcError) as info:
            await c.call("no/such", {})
        assert info.value.code == -32601
        running = asyncio.create_task(c.prompt(sid, "first"))
        await c.wait_until(lambda: bool(c.updates))
        with pytest.raises(JsonRpcError) as info:
            await c.prompt(sid, "second")
        assert info.value.code == -32002
        assert await c.call("session/cancel", {"sessionId": sid}) == {}
        assert (await running)["stopReason"] == "cancelled"
        assert await c.call("session/cancel", {"sessionId": "unknown"}) == {}
        assert await c.call("session/close", {"sessionId": sid}) == {}
        with pytest.raises(JsonRpcError) as info:
            await c.prompt(sid, "after close")
        assert info.value.code == -32000


async def test_prompt_parts_are_joined(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        await c.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "look at"},
            {"type": "resource", "resource": {"uri": "file:///a.py", "text": "print(1)"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
            {"type": "text", "text": "please"}]})
    assert provider.calls[0][1][-1].text == "look at\n\nprint(1)\n\nplease"


class FailingProvider(ScriptedProvider):
    async def stream(self, system, messages, tools):
        self.calls.append((system, list(messages), list(tools)))
        yield ThoughtDelta("trying")
        raise ProviderError("openai API error 401: bad key <redacted>")


async def test_provider_error_is_32603_and_turn_rolled_back(tmp_path: Path, ws: Path) -> None:
    provider = FailingProvider([[]])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        with pytest.raises(JsonRpcError) as info:
            await c.prompt(sid, "one")
        assert info.value.code == -32603 and "401" in info.value.message
        with pytest.raises(JsonRpcError):
            await c.prompt(sid, "two")
    assert [m.text for m in provider.calls[1][1]] == ["two"]  # the failed turn left nothing


def test_seeded_write_and_edit_calls_get_tool_arguments_back() -> None:
    from services.agent.history import seed_messages

    diff = {"path": "/w/f.txt", "oldText": "a", "newText": "b"}
    msgs = seed_messages([
        {"role": "user", "text": "x"},
        {"role": "tool_call", "toolCallId": "1", "toolName": "file_write", "arguments": diff},
        {"role": "tool_result", "toolCallId": "1", "output": "ok"},
        {"role": "tool_call", "toolCallId": "2", "toolName": "file_edit", "arguments": diff},
        {"role": "tool_result", "toolCallId": "2", "output": "ok", "status": "failed"},
        {"role": "tool_call", "toolCallId": "3", "toolName": "shell",
         "arguments": {"command": "ls"}},
        {"role": "tool_result", "toolCallId": "3", "output": "a"},
    ])
    calls = [c for m in msgs for c in m.tool_calls]
    assert calls[0].arguments == {"path": "/w/f.txt", "content": "b"}
    assert calls[1].arguments == {"path": "/w/f.txt", "old_string": "a", "new_string": "b"}
    assert calls[2].arguments == {"command": "ls"}
    assert [m.failed for m in msgs if m.role == "tool"] == [False, True, False]


async def test_whitespace_prompt_is_a_normal_prompt_and_empty_is_32602(tmp_path: Path,
                                                                      ws: Path) -> None:
    """SPEC §4: only a prompt with no text at all is invalid; whitespace is used verbatim."""
    provider = ScriptedProvider([say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await c.new_session(ws)
        for prompt in ("   ", [{"type": "text", "text": " \n\t "}]):
            result = await c.call("session/prompt", {"sessionId": sid, "prompt": prompt})
            assert result["stopReason"] == "end_turn"
        empties: list[Any] = ["", [], [{"type": "text", "text": ""}], [{"type": "text"}],
                              [{"type": "image", "data": "AA=="}]]
        for prompt in empties:
            with pytest.raises(JsonRpcError) as info:
                await c.call("session/prompt", {"sessionId": sid, "prompt": prompt})
            assert (info.value.code, info.value.message) == (
                -32602, "Parameter 'prompt' array must contain at least one text part")
        assert (await c.prompt(sid, "after"))["stopReason"] == "end_turn"  # slot was free
    assert [call[1][-1].text for call in provider.calls] == ["   ", " \n\t ", "after"]


async def test_whitespace_prompt_reaches_anthropic_as_accepted_text(tmp_path: Path,
                                                                    ws: Path) -> None:
    """The Messages API refuses whitespace-only text blocks (a -32603 for the user)."""
    from services.agent.providers.anthropic import AnthropicProvider
    from services.agent.providers.http import RetryPolicy
    from tests.agent.fake_http import FakeProviderServer, anthropic_sse

    reply = anthropic_sse(
        {"type": "message_start", "message": {"id": "m", "role": "assistant", "content": [],
                                              "usage": {"input_tokens": 1, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": "fine"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 1}},
        {"type": "message_stop"})
    async with FakeProviderServer([reply]) as srv:
        provider = AnthropicProvider("claude-x", api_key="k", base_url=srv.url,
                                     retry=RetryPolicy(max_retries=0, backoff_base=0.01))
        async with running_agent(make_config(tmp_path), provider) as c:
            sid = await c.new_session(ws)
            result = await c.call("session/prompt", {"sessionId": sid, "prompt": " \n "})
        body = srv.requests[0].body
    assert result["stopReason"] == "end_turn"
    (block,) = body["messages"][-1]["content"]
    assert block["text"].strip()
    assert block["text"] == '(a message of only whitespace: " \\n ")'
