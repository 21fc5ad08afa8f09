"""MCP servers end to end: the client's ``mcpServers`` through `acpgate acp`.

Everything is real except the model: `acpgate acp` with its embedded services,
the lifecycle wrapper, the built-in agent, and MCP servers written with the SDK
(``tests/agent/mcp_server.py``) over stdio and HTTP; a local HTTP server plays
the OpenAI-compatible model and issues the tool calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.agent.mcp_fixtures import SERVER, stdio_entry
from tests.agent.mcp_server import PDF_BYTES
from tests.e2e.fake_model import API_KEY_ENV, ModelServer, agent_entry, text_reply, tool_reply
from tests.e2e.harness import AcpProcess, gone, updates, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _child_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-e2e-not-a-real-key")
    monkeypatch.setenv("ACPGATE_LOG_LEVEL", "info")  # the agent logs MCP stderr at info


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def start(tmp_path: Path, model: ModelServer, *, extra: str = "") -> AcpProcess:
    cfg = write_config(tmp_path / "cfg", default_agent="mcp", autonomy="full",
                       extra=agent_entry("mcp", model) + extra)
    return AcpProcess(cfg)


def tool_updates(messages: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    return [u for u in updates(messages, sid) if u["sessionUpdate"] == "tool_call_update"]


def tool_results_sent(model: ModelServer, request_no: int) -> list[str]:
    """The tool messages the agent sent the model in request ``request_no``."""
    body = model.requests[request_no].body
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_stdio_text_blob_and_crash_through_acpgate_acp(tmp_path: Path, workspace: Path) -> None:
    replies = [tool_reply(("docs__echo", {"text": "hello"}), ("docs__blob_resource", {}),
                          ("docs__crash", {})),
               text_reply("first turn done"),
               tool_reply(("docs__echo", {"text": "after the crash"})),
               text_reply("second turn done")]
    with ModelServer(replies) as model:
        acp = start(tmp_path, model)
        try:
            sid = acp.new_session(cwd=str(workspace), mcpServers=[stdio_entry()])
            before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "go"})
            assert resp["result"]["stopReason"] == "end_turn"
            echo, blob, crash = tool_updates(before, sid)
            assert echo["status"] == "completed" and echo["rawOutput"] == "echo: hello"
            stored = Path(os.path.realpath(workspace)) / "uploads" / (
                hashlib.sha256(PDF_BYTES).hexdigest() + ".pdf")
            assert stored.read_bytes() == PDF_BYTES
            marker = f"[Document: Q3.pdf] {stored}"
            assert blob["status"] == "completed" and blob["rawOutput"].endswith(marker)
            assert any(c["content"].get("type") == "resource" for c in blob["content"])
            assert crash["status"] == "failed"
            assert crash["rawOutput"] == ("The MCP server `docs` stopped while running `crash` "
                                          "(exit code 3).")
            # What the model got: the text, the marker (never base64), the crash sentence.
            sent = tool_results_sent(model, 1)
            assert sent == ["echo: hello", blob["rawOutput"], crash["rawOutput"]]
            assert "JVBER" not in json.dumps(model.requests[1].body)  # base64 of "%PDF"
            # The session goes on: the next call restarts the server.
            before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "again"})
            assert resp["result"]["stopReason"] == "end_turn"
            (again,) = tool_updates(before, sid)
            assert again["status"] == "completed" and again["rawOutput"] == "echo: after the crash"
        finally:
            assert acp.close() == 0


def test_http_server_on_a_local_port_through_acpgate_acp(tmp_path: Path,
                                                         workspace: Path) -> None:
    import subprocess
    import sys

    server = subprocess.Popen([sys.executable, str(SERVER), "--transport", "http"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().decode().split()[1])
        url = f"http://127.0.0.1:{port}/mcp"
        with ModelServer([tool_reply(("web__echo", {"text": "over http"})),
                          text_reply("done")]) as model:
            acp = start(tmp_path, model)
            try:
                init = acp.result("initialize", {"protocolVersion": 1})
                assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True,
                                                                        "sse": True}
                sid = acp.new_session(cwd=str(workspace), mcpServers=[
                    {"type": "http", "name": "web", "url": url, "headers": []}])
                before, _ = acp.call("session/prompt", {"sessionId": sid, "prompt": "go"})
                (update,) = tool_updates(before, sid)
                assert update["status"] == "completed" and update["rawOutput"] == "echo: over http"
            finally:
                assert acp.close() == 0
    finally:
        server.kill()
        server.wait()


def test_http_and_sse_are_promised_only_for_a_builtin_default_agent(tmp_path: Path) -> None:
    """SPEC §2: an external default agent's MCP transports are unknown: stdio only."""
    acp = AcpProcess(write_config(tmp_path / "cfg", default_agent="sdk"))
    try:
        init = acp.result("initialize", {"protocolVersion": 1})
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": False, "sse": False}
    finally:
        assert acp.close() == 0


def test_server_stderr_goes_to_the_session_log_never_stdout(tmp_path: Path,
                                                            workspace: Path) -> None:
    with ModelServer([tool_reply(("docs__shout_stderr", {"text": "kept-out-of-stdout"})),
                      text_reply("done")]) as model:
        acp = start(tmp_path, model)
        try:
            sid = acp.new_session(cwd=str(workspace), mcpServers=[stdio_entry()])
            acp.call("session/prompt", {"sessionId": sid, "prompt": "go"})
        finally:
            assert acp.close() == 0
    assert not any("STDERR-MARK" in line for line in acp.raw_lines)
    logs = list((acp.config_dir / "data" / "lifecycle" / "logs").glob("*.log"))
    entries = [json.loads(line) for log in logs for line in log.read_text().splitlines()
               if line.startswith("{") and "STDERR-MARK" in line]
    assert [(e["event"], e["server"], e["line"]) for e in entries] == [
        ("mcp_stderr", "docs", "STDERR-MARK kept-out-of-stdout")]
    assert entries[0]["session_id"]  # attributed to the agent's session


def test_load_and_resume_restart_the_stored_or_the_passed_servers(tmp_path: Path,
                                                                   workspace: Path) -> None:
    """A load/resume without mcpServers starts the session's stored list; one with a list
    starts that list and stores it (across an acpgate restart)."""
    who = ("docs__whoami", {})
    replies = [tool_reply(who), text_reply("1"), tool_reply(who), text_reply("2"),
               tool_reply(who), text_reply("3")]
    with ModelServer(replies) as model:
        first = start(tmp_path, model)
        try:
            sid = first.new_session(cwd=str(workspace), mcpServers=[
                stdio_entry(env={"MCP_TEST_VAR": "one"})])
            first.call("session/prompt", {"sessionId": sid, "prompt": "who"})
        finally:
            assert first.close() == 0
        second = AcpProcess(first.config_dir)
        try:
            second.result("session/resume", {"sessionId": sid, "cwd": str(workspace)})
            before, _ = second.call("session/prompt", {"sessionId": sid, "prompt": "who"})
            (update,) = tool_updates(before, sid)
            assert json.loads(update["rawOutput"])["value"] == "one"  # the stored list
            second.result("session/close", {"sessionId": sid})
            second.result("session/load", {"sessionId": sid, "cwd": str(workspace),
                                           "mcpServers": [stdio_entry(env={"MCP_TEST_VAR": "two"})]})
            before, _ = second.call("session/prompt", {"sessionId": sid, "prompt": "who"})
            (update,) = tool_updates(before, sid)
            assert json.loads(update["rawOutput"])["value"] == "two"  # the passed list
        finally:
            assert second.close() == 0
    db = first.config_dir / "data" / "sessions" / "acp-sessions.db"
    with sqlite3.connect(db) as con:
        (stored,) = con.execute("SELECT mcp_servers_json FROM sessions WHERE id = ?",
                                (sid,)).fetchone()
    assert json.loads(stored) == [stdio_entry(env={"MCP_TEST_VAR": "two"})]


# ---------------------------------------------------------------------- kill -9


def tree(acp: AcpProcess, pidfile: Path) -> dict[str, psutil.Process]:
    """wrapper, agent, MCP server and the server's grandchild, found by what they run."""
    pids = json.loads(pidfile.read_text())
    procs = {"server": psutil.Process(pids["server"]), "child": psutil.Process(pids["child"])}
    procs["agent"] = psutil.Process(procs["server"].ppid())
    procs["wrapper"] = psutil.Process(procs["agent"].ppid())
    assert "services.agent" in " ".join(procs["agent"].cmdline())
    assert procs["wrapper"].ppid() == acp.proc.pid
    return procs


@pytest.fixture
def started_tree(tmp_path: Path, workspace: Path) -> Iterator[tuple[AcpProcess,
                                                                    dict[str, psutil.Process]]]:
    pidfile = tmp_path / "pids.json"
    with ModelServer([tool_reply(("docs__spawn_child", {"pidfile": str(pidfile)})),
                      text_reply("spawned")]) as model:
        acp = start(tmp_path, model, extra="\n[lifecycle]\nterm_grace_ms = 500\n")
        procs: dict[str, psutil.Process] = {}
        try:
            sid = acp.new_session(cwd=str(workspace), mcpServers=[stdio_entry()])
            acp.call("session/prompt", {"sessionId": sid, "prompt": "spawn"})
            procs = tree(acp, pidfile)
            # The server and its child are in the lease's process group, led by the agent.
            group = procs["agent"].pid
            assert os.getpgid(procs["agent"].pid) == group
            assert os.getpgid(procs["server"].pid) == group
            assert os.getpgid(procs["child"].pid) == group
            yield acp, procs
        finally:
            acp.kill()
            for p in procs.values():
                if p.is_running():
                    p.kill()


def test_kill_9_of_acpgate_reaps_the_mcp_server_and_its_child(
        started_tree: tuple[AcpProcess, dict[str, psutil.Process]]) -> None:
    acp, procs = started_tree
    acp.proc.send_signal(signal.SIGKILL)
    acp.proc.wait()
    # The child ignores SIGTERM: only the wrapper's SIGKILL of the group ends it.
    assert gone([p.pid for p in procs.values()], wait=20), {
        k: p.pid for k, p in procs.items() if p.is_running()}


def test_kill_9_of_the_agent_reaps_the_mcp_server_and_its_child(
        started_tree: tuple[AcpProcess, dict[str, psutil.Process]]) -> None:
    acp, procs = started_tree
    procs["agent"].send_signal(signal.SIGKILL)
    assert gone([procs[k].pid for k in ("agent", "server", "child")], wait=20)
    time.sleep(0.1)
    assert acp.proc.poll() is None  # acpgate itself carries on


def test_kill_9_of_the_wrapper_still_reaps_the_mcp_tree_by_its_group(
        started_tree: tuple[AcpProcess, dict[str, psutil.Process]]) -> None:
    """The lease's root is gone, so only the process group (and the lease id in the
    environment) ties the agent's MCP server and its child to the lease: the release
    of the session reaps them. A server in a session of its own would leak its child."""
    acp, procs = started_tree
    procs["wrapper"].send_signal(signal.SIGKILL)
    assert gone([procs["wrapper"].pid], wait=10)
    assert acp.close() == 0
    assert gone([procs[k].pid for k in ("agent", "server", "child")], wait=20), {
        k: p.pid for k, p in procs.items() if p.is_running()}
