"""Every frame the agent emits parses as the official ACP schema (the SDK's pydantic models)."""

from __future__ import annotations

from pathlib import Path

from acp import schema

from tests.agent.harness import make_config, running_agent


async def test_all_frames_match_acp_schema(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha")
    async with running_agent(make_config(tmp_path)) as c:
        init = await c.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        schema.InitializeResponse.model_validate(init)
        new = await c.call("session/new", {"cwd": str(ws), "mcpServers": []})
        schema.NewSessionResponse.model_validate(new)
        sid = new["sessionId"]
        results = []
        for text in ["hello", "!echo hi", "write b.txt beta", "plan", "deliver a.txt",
                     "read a.txt", "ask Which? | x | y"]:
            results.append(await c.prompt(sid, text))
        await c.call("session/load", {"sessionId": sid, "cwd": str(ws), "mcpServers": []})
    for result in results:
        parsed = schema.PromptResponse.model_validate(result)
        assert parsed.stop_reason == "end_turn"
    kinds = set()
    for params in c.updates:
        note = schema.SessionNotification.model_validate(params)
        kinds.add(note.update.session_update)
    assert kinds >= {"agent_message_chunk", "agent_thought_chunk", "tool_call",
                     "tool_call_update", "plan", "user_message_chunk"}
    assert c.requests
    for method, params in c.requests:
        assert method == "session/request_permission"
        schema.RequestPermissionRequest.model_validate(params)
