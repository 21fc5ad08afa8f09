"""MCP servers that fail: a clear tool error for the model and the client, and the session
goes on. Also the HTTP transports and restarting on resume.

Real SDK servers as child processes (and over HTTP on an OS-chosen port); scripted model.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from services.agent.turn import CANCELLED_TOOL_OUTPUT
from tests.agent.harness import ScriptedProvider, call, make_config, running_agent, say
from tests.agent.mcp_fixtures import (
    http_entry,
    http_server,
    new_session,
    server_processes,
    stdio_entry,
    tool_message,
)

pytestmark = pytest.mark.slow


def mcp_log(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    """The structured fields of the agent's MCP log records named ``event``."""
    return [getattr(r, "acpgate_fields", {}) for r in caplog.records
            if r.name == "acpgate.agent.mcp" and r.getMessage() == event]


async def test_crash_mid_call_is_a_tool_error_and_the_next_call_restarts_it(
        tmp_path: Path, ws: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="acpgate")
    provider = ScriptedProvider([call("docs__crash", {}, "c1"),
                                 call("docs__echo", {"text": "still here"}, "c2"), say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        (first,) = server_processes()
        result = await c.prompt(sid, "crash it")
        (second,) = server_processes()
    assert result["stopReason"] == "end_turn"
    crashed, echoed = c.of("tool_call_update")
    assert crashed["status"] == "failed"
    assert crashed["rawOutput"] == ("The MCP server `docs` stopped while running `crash` "
                                    "(exit code 3).")
    assert provider.calls[1][1][-1].text == crashed["rawOutput"]  # the model saw the same
    assert echoed["status"] == "completed" and echoed["rawOutput"] == "echo: still here"
    assert first.pid != second.pid
    # The server's stderr went to the agent's log, attributed to the session and server.
    lines = mcp_log(caplog, "mcp_stderr")
    assert {"session_id": sid, "server": "docs",
            "line": "about to crash on purpose"} in lines


async def test_call_timeout_is_a_tool_error(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([call("docs__slow", {"seconds": 30}), say("ok")])
    cfg = make_config(tmp_path, mcp_call_timeout_secs=1)
    async with running_agent(cfg, provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        await c.prompt(sid, "wait")
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed"
    assert update["rawOutput"] == "The MCP server `docs` did not answer `slow` within 1 seconds."


async def test_server_that_fails_to_start_is_told_to_the_model(tmp_path: Path,
                                                               ws: Path) -> None:
    provider = ScriptedProvider([call("bad__echo", {"text": "x"}), say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry("bad", mode="fail-start"), stdio_entry()])
        result = await c.prompt(sid, "use bad")
    assert result["stopReason"] == "end_turn"
    reason = "it stopped before the MCP handshake finished (exit code 7)"
    system, _, specs = provider.calls[0]
    assert f"MCP server `bad` is unavailable: {reason}" in system
    assert "docs__echo" in {s.name for s in specs}  # the other server is fine
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed"
    assert update["rawOutput"] == f"The MCP server `bad` is unavailable: {reason}"


async def test_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path,
                                                                  ws: Path) -> None:
    provider = ScriptedProvider([say("ok")])
    cfg = make_config(tmp_path, mcp_startup_timeout_secs=1)
    async with running_agent(cfg, provider) as c:
        sid = await new_session(c, ws, [stdio_entry("slowpoke", mode="hang-start")])
        assert server_processes() == []  # killed, not left hanging
        await c.prompt(sid, "hi")
    assert ("MCP server `slowpoke` is unavailable: it did not start within 1 seconds"
            in provider.calls[0][0])


async def test_missing_command_is_a_clear_start_error(tmp_path: Path, ws: Path) -> None:
    provider = ScriptedProvider([say("ok")])
    entry = {"name": "ghost", "command": str(tmp_path / "no-such-server"), "args": [], "env": []}
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [entry])
        await c.prompt(sid, "hi")
    assert (f"MCP server `ghost` is unavailable: cannot start `{tmp_path / 'no-such-server'}`: "
            "No such file or directory") in provider.calls[0][0]


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_http_and_sse_servers_on_a_local_port(tmp_path: Path, ws: Path,
                                                    transport: str) -> None:
    provider = ScriptedProvider([call("web__echo", {"text": transport}, "c1"),
                                 call("web__blob_resource", {}, "c2"), say("ok")])
    async with http_server(transport) as url, running_agent(make_config(tmp_path),
                                                            provider) as c:
        sid = await new_session(c, ws, [http_entry(url, transport=transport,
                                                   headers={"X-Test": "1"})])
        await c.prompt(sid, "go")
    echoed, blob = c.of("tool_call_update")
    assert echoed["status"] == "completed" and echoed["rawOutput"] == f"echo: {transport}"
    assert blob["status"] == "completed" and "[Document: Q3.pdf]" in blob["rawOutput"]


async def test_resume_with_a_new_list_replaces_and_without_one_keeps(tmp_path: Path,
                                                                     ws: Path) -> None:
    provider = ScriptedProvider([call("docs__whoami", {}), say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        (first,) = server_processes()
        await c.call("session/resume", {"sessionId": sid, "cwd": str(ws)})
        assert [p.pid for p in server_processes()] == [first.pid]  # no list: kept
        await c.call("session/resume", {"sessionId": sid, "cwd": str(ws),
                                        "mcpServers": [stdio_entry()]})
        assert [p.pid for p in server_processes()] == [first.pid]  # the same list: kept
        await c.call("session/resume", {"sessionId": sid, "cwd": str(ws),
                                        "mcpServers": [stdio_entry(env={"MCP_TEST_VAR": "v2"})]})
        (second,) = server_processes()
        assert second.pid != first.pid  # another list: restarted with it
        await c.prompt(sid, "who")
        await c.call("session/resume", {"sessionId": sid, "cwd": str(ws), "mcpServers": []})
        assert server_processes() == []
    assert json.loads(tool_message(provider))["value"] == "v2"


async def test_restore_from_history_starts_the_passed_servers(tmp_path: Path,
                                                              ws: Path) -> None:
    """The edge's restore path: an unknown id, seeded from history, with the stored list."""
    provider = ScriptedProvider([call("docs__echo", {"text": "back"}), say("ok")])
    async with running_agent(make_config(tmp_path), provider) as c:
        await c.call("session/resume", {"sessionId": "restored-1", "cwd": str(ws),
                                        "mcpServers": [stdio_entry()],
                                        "_meta": {"acpgate": {"history": []}}})
        await c.prompt("restored-1", "echo")
    (update,) = c.of("tool_call_update")
    assert update["rawOutput"] == "echo: back"


async def test_cancel_during_a_call_ends_the_turn_and_the_server_stays(tmp_path: Path,
                                                                     ws: Path) -> None:
    provider = ScriptedProvider([call("docs__slow", {"seconds": 120}, "c1"),
                                 call("docs__echo", {"text": "after"}, "c2"), say("ok")])
    async with running_agent(make_config(tmp_path, autonomy="full"), provider) as c:
        sid = await new_session(c, ws, [stdio_entry()])
        (server,) = server_processes()
        prompt = asyncio.create_task(c.prompt(sid, "wait"))
        await c.wait_until(lambda: bool(c.of("tool_call")))
        await asyncio.sleep(0.5)  # let the call reach the server (nothing asserts on it)
        await c.call("session/cancel", {"sessionId": sid})
        assert (await prompt)["stopReason"] == "cancelled"
        (cancelled,) = c.of("tool_call_update")
        assert cancelled["status"] == "failed" and cancelled["rawOutput"] == CANCELLED_TOOL_OUTPUT
        await c.prompt(sid, "again")
        assert [p.pid for p in server_processes()] == [server.pid]  # the same server served it
    assert c.of("tool_call_update")[1]["rawOutput"] == "echo: after"
