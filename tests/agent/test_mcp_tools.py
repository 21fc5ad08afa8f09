"""MCP servers from ``session/new`` become the session's tools, in-process agent.

A real MCP server written with the SDK (``tests/agent/mcp_server.py``) runs as a
child process; the model is scripted. What is checked: names and schemas
offered to the model, text / blob / image results for the model and the client
(SPEC §4's blob rule), approval and policy, the server's environment, cwd and
process group, the operator's config servers, and that servers stop with the session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from services.common.config import AutonomySection
from services.common.mcp_servers import parse_server
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say
from tests.agent.mcp_fixtures import (
    new_session,
    real,
    server_processes,
    stdio_entry,
    tool_message,
    uploaded,
)
from tests.agent.mcp_server import PDF_BYTES, PNG_BYTES

pytestmark = pytest.mark.slow


async def test_tools_are_offered_as_server__tool_with_their_schemas(tmp_path: Path,
                                                                    ws: Path) -> None:
    provider = ScriptedProvider([say("hi")])
    async with running_agent(make_config(tmp_path), provider) as c:
        init = c.server._initialize({"protocolVersion": 1})
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}
        sid = await new_session(c, ws, [stdio_entry("my docs")])
        await c.prompt(sid, "hello")
    _, _, specs = provider.calls[0]
    by_name = {s.name: s for s in specs}
    assert "shell" in by_name  # the built-in tools stay
    echo = by_name["my_docs__echo"]
    assert echo.parameters["type"] == "object"
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]
    assert "Return the text unchanged." in echo.description
    assert {"my_docs__crash", "my_docs__blob_resource", "my_docs__image"} <= set(by_name)


async def test_text_result_goes_to_model_and_client(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("docs__echo", {"text": "hi there"}), say("done")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        result = await c.prompt(sid, "echo it")
    assert result["stopReason"] == "end_turn"
    (opened,) = c.of("tool_call")
    assert opened["name"] == "docs__echo" and opened["kind"] == "read"
    assert opened["rawInput"] == {"text": "hi there"}
    (update,) = c.of("tool_call_update")
    assert update["status"] == "completed"
    assert update["rawOutput"] == update["body"] == "echo: hi there"
    assert update["content"] == [{"type": "content",
                                  "content": {"type": "text", "text": "echo: hi there"}}]
    assert tool_message(provider) == "echo: hi there"


async def test_blob_resource_is_materialized_like_a_prompt_blob(tmp_path: Path,
                                                                ws: Path) -> None:
    """SPEC §4: uploads/<sha256>.<ext>, marker for the model, base64 never in the model text."""
    provider = ScriptedProvider([call("docs__blob_resource", {}), say("done")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "get the report")
    stored = uploaded(ws, PDF_BYTES, "pdf")
    assert stored.read_bytes() == PDF_BYTES
    text = tool_message(provider)
    assert text == f"here is the report\n\n[Document: Q3.pdf] {stored}"
    (update,) = c.of("tool_call_update")
    assert update["status"] == "completed" and update["rawOutput"] == text
    resource = update["content"][1]["content"]
    assert resource["type"] == "resource"
    assert resource["resource"]["uri"] == "file:///reports/Q3.pdf"
    assert resource["resource"]["mimeType"] == "application/pdf"


async def test_image_becomes_acp_image_content_and_an_image_marker(tmp_path: Path,
                                                                    ws: Path) -> None:
    provider = ScriptedProvider([call("docs__image", {}), say("done")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "show me")
    stored = uploaded(ws, PNG_BYTES, "png")
    assert tool_message(provider) == f"[IMAGE:{stored}]"
    assert stored.read_bytes() == PNG_BYTES
    (update,) = c.of("tool_call_update")
    image = update["content"][1]["content"]
    assert image["type"] == "image" and image["mimeType"] == "image/png"


async def test_blob_over_the_limit_is_refused_in_a_sentence(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("docs__big_blob", {}), say("done")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "big one")
    assert tool_message(provider) == ("[Resource file:///huge.bin not saved: Embedded resource "
                                      "exceeds 10 MB limit (10485761 bytes)]")
    assert not (ws / "uploads").exists()
    (update,) = c.of("tool_call_update")
    assert len(update["content"]) == 1  # no blob goes to the client either


async def test_is_error_result_is_a_failed_call(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("docs__fail", {}), say("done")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "try")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and update["rawOutput"] == "the widget is jammed"
    assert provider.calls[1][1][-1].failed


async def test_supervised_asks_and_auto_approve_patterns_match_server_tools(
        tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("docs__echo", {"text": "a"}, "c1"), say("one"),
                                 call("docs__echo", {"text": "b"}, "c2"), say("two")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "first")
    ((method, params),) = c.requests
    assert method == "session/request_permission"
    assert params["toolCall"]["rawInput"]["tool"] == "docs__echo"
    cfg = replace(make_config(tmp_path),
                  autonomy=AutonomySection(level="supervised", auto_approve=("docs__*",)))
    provider = ScriptedProvider([call("docs__echo", {"text": "a"}), say("one")])
    async with running_agent(cfg, provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "first")
    assert c.requests == []
    assert c.of("tool_call_update")[0]["status"] == "completed"


async def test_readonly_offers_and_runs_only_tools_marked_read_only(tmp_path: Path,
                                                                    ws: Path) -> None:
    provider = ScriptedProvider([call("docs__shout_stderr", {"text": "x"}), say("done")])
    async with running_agent(make_config(tmp_path, autonomy="readonly"), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "try")
    offered = {s.name for s in provider.calls[0][2]}
    assert {"docs__echo", "docs__whoami"} <= offered
    assert "docs__shout_stderr" not in offered and "docs__crash" not in offered
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "autonomy is readonly" in update["rawOutput"]


async def test_server_runs_in_the_workspace_in_our_group_without_api_keys(
        tmp_path: Path, ws: Path) -> None:
    """stdio servers are the agent's children in its process group (so the lease reaps
    them), start in the session workspace, get their own env, never the provider key."""
    provider = ScriptedProvider([call("docs__whoami", {}), say("done")])
    cfg = make_config(tmp_path, api_key_env="ACPGATE_TEST_API_KEY")
    environ = {"ACPGATE_TEST_API_KEY": "sk-secret", "PATH": os.environ.get("PATH", "")}
    async with running_agent(cfg, provider, environ=environ) as c:
        sid = await new_session(c, ws, [stdio_entry(env={"MCP_TEST_VAR": "from-acp"})])
        await c.prompt(sid, "who")
        (server,) = server_processes()
        assert server.ppid() == os.getpid()
    info = json.loads(tool_message(provider))
    assert info["cwd"] == str(real(ws))
    assert info["pgid"] == os.getpgid(0)
    assert info["value"] == "from-acp"
    assert info["has_secret"] is False


async def test_close_and_shutdown_stop_the_servers(tmp_path: Path, ws: Path) -> None:
    async with running_agent(make_config(tmp_path), ScriptedProvider([say("x")])) as c:
        sid = await new_session(c, ws, [stdio_entry("one")])
        await new_session(c, ws, [stdio_entry("two")])
        procs = server_processes()
        assert len(procs) == 2
        await c.call("session/close", {"sessionId": sid})
        assert len(server_processes()) == 1
    assert server_processes() == []
    for p in procs:
        assert not p.is_running() or p.status() == "zombie"


async def test_operator_servers_start_first_and_a_clashing_client_name_is_refused(
        tmp_path: Path, ws: Path) -> None:
    """[agents.<alias>] mcp_servers start in every session; the client's list comes after."""
    operator = parse_server(stdio_entry("ops"))
    provider = ScriptedProvider([say("hi")])
    cfg = make_config(tmp_path, mcp_servers=(operator,))
    async with running_agent(cfg, provider) as c:
        sid = await new_session(c, ws, [stdio_entry("ops!"), {"name": "broken"}])
        assert len(server_processes()) == 1
        await c.prompt(sid, "hello")
    system, _, specs = provider.calls[0]
    names = {s.name for s in specs}
    assert "ops__echo" in names
    assert "MCP server `ops!` refused: its name clashes with `ops`" in system
    assert "mcpServers[1] `broken`: `command` must be a non-empty string" in system


def test_the_sdk_is_not_loaded_by_an_agent_without_mcp_servers() -> None:
    """The SDK takes seconds to import: a session without servers must not pay for it."""
    code = ("import asyncio, sys\n"
            "from services.agent.mcp import Launch, SessionMcp\n"
            "import services.agent.server\n"
            "m = SessionMcp(Launch('s', '/', {}, 1, 1, 'v'))\n"
            "asyncio.run(m.start([], ['refused']))\n"
            "assert m.tools() == {} and m.notes() == ['refused']\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('mcp', 'mcp_types')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "[]"
