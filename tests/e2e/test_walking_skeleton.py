"""The walking skeleton, end to end: `acpgate acp` with embedded services (foundation issue).

initialize → session/new → row in SQLite → lease, wrapper, built-in agent →
session/prompt streams chunks → end_turn → turn stored → EOF leaves no child.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from acpgate import __version__
from tests.e2e.harness import ACPGATE, AcpProcess, child_env, gone, updates, write_config

pytestmark = pytest.mark.slow


def expected_initialize(max_sessions: int = 3, timeout: int = 3600) -> dict[str, Any]:
    """The exact SPEC §2 result for the harness config (default agent demo/demo)."""
    return {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            # The default agent is built-in, which speaks MCP over HTTP and SSE.
            "mcpCapabilities": {"http": True, "sse": True},
            # SPEC §2's three, plus delete and additionalDirectories, and fork
            # (acpgate forks any agent's sessions itself)
            "sessionCapabilities": {"resume": {}, "close": {}, "list": {}, "delete": {},
                                    "additionalDirectories": {}, "fork": {}},
        },
        "agentInfo": {"name": "acpgate", "title": "acpgate ACP Gateway", "version": __version__},
        "authMethods": [],
        "_meta": {"zeroclaw": {"defaultModel": "demo/demo", "maxSessions": max_sessions,
                               "sessionTimeoutSecs": timeout}},
    }


def test_raw_json_lines_walking_skeleton(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    acp = AcpProcess(cfg)
    try:
        assert acp.result("initialize", {"protocolVersion": 1}) == expected_initialize()
        result = acp.result("session/new", {})
        sid = result["sessionId"]
        assert uuid.UUID(sid).version == 4 and str(uuid.UUID(sid)) == sid
        workspace = cfg / "agents" / "demo" / "workspace"
        assert result["workspaceDir"] == os.path.realpath(workspace)

        db = cfg / "data" / "sessions" / "acp-sessions.db"
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT agent_alias FROM sessions WHERE id = ?",
                                (sid,)).fetchone() == ("demo",)

        children = [p.pid for p in acp.descendants()]
        assert children, "the lifecycle service should have spawned a wrapper and the agent"
        with sqlite3.connect(cfg / "data" / "lifecycle" / "leases.db") as conn:
            lease = conn.execute("SELECT state, root_pid FROM leases WHERE session_key = ?",
                                 (f"agent:demo:acp:{sid}",)).fetchone()
        assert lease is not None and lease[0] == "open" and lease[1] in children

        before, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "hello skeleton"})
        chunks = [u for u in updates(before, sid) if u["sessionUpdate"] == "agent_message_chunk"]
        assert chunks, "chunks must stream before the result"
        res = resp["result"]
        assert res["sessionId"] == sid and res["stopReason"] == "end_turn"
        assert res["content"] == "".join(c["content"]["text"] for c in chunks)
        assert "hello skeleton" in res["content"]

        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT role, text FROM history WHERE session_id = ? ORDER BY seq",
                                (sid,)).fetchall()
        assert rows[0] == ("user", "hello skeleton")
        with sqlite3.connect(db) as conn:
            (tokens,) = conn.execute("SELECT token_count FROM sessions WHERE id = ?", (sid,)).fetchone()
        assert tokens > 0, "the agent's reported usage is added to the session"
        assert ("assistant", res["content"]) in rows

        children = [p.pid for p in acp.descendants()]
        assert acp.close() == 0
        assert gone(children), "a child process survived EOF"
        with sqlite3.connect(cfg / "data" / "lifecycle" / "leases.db") as conn:
            states = {r[0] for r in conn.execute("SELECT state FROM leases")}
        assert states <= {"closed", "lost"}, states
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT state FROM sessions WHERE id = ?", (sid,)).fetchone() == \
                ("inactive",), "EOF releases the session but keeps its record"
    finally:
        acp.kill()


async def test_official_sdk_client_walking_skeleton(tmp_path: Path) -> None:
    from acp import spawn_agent_process, text_block
    from acp.schema import ClientCapabilities

    cfg = write_config(tmp_path / "cfg")
    seen: list[Any] = []

    class Recorder:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            seen.append((session_id, update))

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("no permission expected")

        def on_connect(self, conn: Any) -> None:
            pass

    env = dict(os.environ)  # the SDK otherwise passes a minimal environment
    async with spawn_agent_process(Recorder(),  # type: ignore[arg-type]
                                   ACPGATE[0], *ACPGATE[1:], "acp", "--config-dir",
                                   str(cfg), env=env) as (conn, proc):
        init = await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities())
        assert init.protocol_version == 1
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        project = tmp_path / "project"  # beside the config dir (a cwd holding it is refused)
        project.mkdir()
        new = await conn.new_session(cwd=str(project), mcp_servers=[])
        assert uuid.UUID(new.session_id).version == 4
        resp = await conn.prompt(session_id=new.session_id, prompt=[text_block("hi from sdk")])
        assert resp.stop_reason == "end_turn"
        chunks = [u for s, u in seen if s == new.session_id
                  and getattr(u, "session_update", "") == "agent_message_chunk"]
        assert chunks and "hi from sdk" in "".join(c.content.text for c in chunks)
        import psutil

        pids = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert pids
    # spawn_agent_process closed stdin: acpgate must exit 0 and leave nothing behind
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert await asyncio.to_thread(gone, pids)
    assert sys.executable  # the same interpreter ran everything


def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    """SIGTERM ends `acpgate acp` like EOF: sessions closed, exit 0, no child left."""
    import signal

    acp = AcpProcess(write_config(tmp_path / "cfg"))
    try:
        acp.new_session(agentAlias="demo")
        children = [p.pid for p in acp.descendants()]
        assert children
        acp.proc.send_signal(signal.SIGTERM)
        assert acp.proc.wait(60) == 0
        assert gone(children)
    finally:
        acp.kill()


def test_unreachable_configured_services_fall_back_to_embedded(tmp_path: Path) -> None:
    """§0: with no reachable services configured, `acpgate acp` runs them embedded.

    An IDE must get its handshake answered rather than see the agent die.
    """
    cfg = write_config(tmp_path / "cfg", extra=(
        "[services]\n"
        f'session_addr = "unix:{tmp_path}/nobody-s.sock"\n'
        f'lifecycle_addr = "unix:{tmp_path}/nobody-l.sock"\n'))
    acp = AcpProcess(cfg)
    try:
        assert acp.result("initialize", {"protocolVersion": 1})["protocolVersion"] == 1
        sid = acp.new_session()
        _, resp = acp.call("session/prompt", {"sessionId": sid, "prompt": "hello"})
        assert resp["result"]["stopReason"] == "end_turn"
        assert acp.close() == 0
        assert any("running them embedded" in line for line in acp.stderr)
    finally:
        acp.kill()


def test_piped_requests_are_answered_after_stdin_closes(tmp_path: Path) -> None:
    """§0 "exits on EOF" — after answering what it was asked (a CI runner pipes and closes)."""
    cfg = write_config(tmp_path / "cfg")
    first = AcpProcess(cfg)
    try:
        sid = first.new_session()
        first.result("session/prompt", {"sessionId": sid, "prompt": "remember me"})
        assert first.close() == 0
    finally:
        first.kill()
    lines = "\n".join(json.dumps(m) for m in [
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/load", "params": {"sessionId": sid}},
    ]) + "\n"
    out = subprocess.run([*ACPGATE, "acp", "--config-dir", str(cfg)], input=lines,
                         capture_output=True, text=True, timeout=120, env=child_env())
    assert out.returncode == 0, out.stderr
    answers = {m["id"]: m for m in map(json.loads, out.stdout.splitlines()) if "id" in m}
    assert "result" in answers[1] and uuid.UUID(answers[1]["result"]["sessionId"]).version == 4
    assert answers[2]["id"] == 2 and set(answers[2]["result"]) == {"modes", "configOptions"}
    assert "remember me" in out.stdout  # the replay came before the answer
