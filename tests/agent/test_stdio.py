"""The agent as a real subprocess on stdio pipes: raw JSON lines, and the official ACP SDK client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytestmark = pytest.mark.slow

CONFIG = """
[acp]
default_agent = "a"
session_timeout_secs = 30
[autonomy]
level = "supervised"
[agents.a]
kind = "builtin"
provider = "demo"
model = "demo"
"""


def agent_command(config_dir: Path) -> list[str]:
    """``acpgate agent``: the built-in agent on its own, as an editor launches it."""
    return [sys.executable, "-m", "acpgate", "agent", "--config-dir", str(config_dir),
            "--alias", "a"]


def edge_agent_command(config_dir: Path) -> list[str]:
    """The command the session service launches behind the edge (``launch_spec``)."""
    return [sys.executable, "-m", "services.agent", "--config-dir", str(config_dir),
            "--alias", "a"]


class Proc:
    """Raw line I/O with the agent process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.seen: list[dict[str, Any]] = []

    async def send(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        data = obj if isinstance(obj, bytes) else orjson.dumps(obj)
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 20)
        assert line, "agent closed stdout"
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        msg: dict[str, Any] = orjson.loads(line)
        self.seen.append(msg)
        return msg

    async def until(self, pred: Any) -> dict[str, Any]:
        while True:
            msg = await self.read()
            if pred(msg):
                return msg


@contextlib.asynccontextmanager
async def spawn(tmp_path: Path, command: Any = agent_command) -> AsyncIterator[Proc]:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text(CONFIG)
    proc = await asyncio.create_subprocess_exec(
        *command(tmp_path / "cfg"), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env=dict(os.environ))
    try:
        yield Proc(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_raw_json_lines_over_real_pipes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with spawn(tmp_path) as p:
        await p.send(b"this is not json")
        err = await p.read()
        assert set(err) == {"jsonrpc", "id", "error"} and err["id"] is None
        assert err["error"]["code"] == -32700
        assert err["error"]["message"].startswith("Parse error: ")
        await p.send([{"jsonrpc": "2.0", "id": 1, "method": "initialize"}])
        assert (await p.read())["error"]["code"] == -32700
        await p.send({"jsonrpc": "1.0", "id": 7, "method": "initialize"})
        assert (await p.read()) == {"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32600, "message": "Invalid JSON-RPC version"}}
        await p.send({"jsonrpc": "2.0", "method": "no/such/notification"})  # never answered
        await p.send({"jsonrpc": "2.0", "id": "x", "result": {}})  # unknown response: dropped
        await p.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": 1}})
        init = await p.read()
        assert init["id"] == 1 and init["result"]["protocolVersion"] == 1
        assert init["result"]["agentCapabilities"]["loadSession"] is False  # no store
        assert init["result"]["agentCapabilities"]["sessionCapabilities"]["resume"] == {}
        assert init["result"]["agentCapabilities"]["promptCapabilities"]["embeddedContext"]
        await p.send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                      "params": {"cwd": str(ws), "mcpServers": []}})
        sid = (await p.read())["result"]["sessionId"]

        # supervised: the shell asks permission; we allow it with our answer under its id
        await p.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                      "params": {"sessionId": sid, "prompt": [{"type": "text",
                                                               "text": "!echo from-shell"}]}})
        ask = await p.until(lambda m: m.get("method") == "session/request_permission")
        assert ask["params"]["toolCall"]["rawInput"] == {
            "tool": "shell", "summary": "echo from-shell",
            "arguments": {"command": "echo from-shell"}}
        await p.send({"jsonrpc": "2.0", "id": ask["id"],
                      "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}})
        result = await p.until(lambda m: m.get("id") == 3)
        assert result["result"]["stopReason"] == "end_turn"
        updates = [m["params"]["update"] for m in p.seen if m.get("method") == "session/update"]
        done = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
        assert done[0]["status"] == "completed" and "from-shell" in done[0]["rawOutput"]

        # cancel a long command while it runs (approval first, then the cancel notification)
        await p.send({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                      "params": {"sessionId": sid, "prompt": [{"type": "text",
                                                               "text": "!sleep 30"}]}})
        ask = await p.until(lambda m: m.get("method") == "session/request_permission")
        await p.send({"jsonrpc": "2.0", "id": ask["id"],
                      "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}})
        await asyncio.sleep(0.3)  # let the command start
        await p.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        cancelled = await p.until(lambda m: m.get("id") == 4)
        assert cancelled["result"]["stopReason"] == "cancelled"
        assert set(cancelled["result"]["usage"]) == {"totalTokens", "inputTokens",
                                                     "outputTokens"}

        assert p.proc.stdin is not None
        p.proc.stdin.close()
        assert await asyncio.wait_for(p.proc.wait(), 10) == 0


async def test_official_acp_sdk_client(tmp_path: Path) -> None:
    from acp import spawn_agent_process, text_block
    from acp.schema import AllowedOutcome, RequestPermissionResponse

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "readme.txt").write_text("sdk says hi")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text(CONFIG)

    class Recorder:
        def __init__(self) -> None:
            self.updates: list[Any] = []
            self.permissions: list[Any] = []

        async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
            self.updates.append(update)

        async def request_permission(self, session_id: str, tool_call: Any, options: Any,
                                     **kw: Any) -> RequestPermissionResponse:
            self.permissions.append((tool_call, options))
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id="allow-once"))

        def on_connect(self, conn: Any) -> None:
            pass

    client = Recorder()
    cmd = agent_command(tmp_path / "cfg")
    sdk_client: Any = client  # a structural Client; the SDK Protocol has more members
    async with spawn_agent_process(sdk_client, cmd[0], *cmd[1:],
                                   env=dict(os.environ)) as (conn, _p):
        init = await conn.initialize(protocol_version=1)
        assert init.protocol_version == 1
        assert init.agent_capabilities is not None
        assert init.agent_capabilities.load_session is False  # no store across restarts
        session = await conn.new_session(cwd=str(ws), mcp_servers=[])
        result = await conn.prompt(session_id=session.session_id,
                                   prompt=[text_block("read readme.txt")])
        assert result.stop_reason == "end_turn"
        result = await conn.prompt(session_id=session.session_id,
                                   prompt=[text_block("!echo sdk-shell")])
        assert result.stop_reason == "end_turn"
        # A session this process knows still loads (and replays).
        await conn.load_session(cwd=str(ws), session_id=session.session_id, mcp_servers=[])
    kinds = [getattr(u, "session_update", None) for u in client.updates]
    assert "agent_message_chunk" in kinds and "tool_call" in kinds
    assert "tool_call_update" in kinds and "user_message_chunk" in kinds  # load replayed
    finished = [u for u in client.updates if getattr(u, "session_update", "") ==
                "tool_call_update"]
    assert finished[0].raw_output == "sdk says hi"
    assert len(client.permissions) == 1  # the shell, not the auto-approved read
    assert client.permissions[0][0].title == "Approve shell?"


async def test_eof_answers_requests_already_read_and_cancels_turns(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text(CONFIG.replace('"supervised"', '"full"'))
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/resume",
         "params": {"sessionId": "s-eof", "cwd": str(ws),
                    "_meta": {"acpgate": {"history": []}}}},
        {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
         "params": {"sessionId": "s-eof", "prompt": [{"type": "text", "text": "!sleep 30"}]}},
    ]
    proc = await asyncio.create_subprocess_exec(
        *agent_command(tmp_path / "cfg"), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env=dict(os.environ))
    out, _ = await asyncio.wait_for(
        proc.communicate(b"".join(orjson.dumps(m) + b"\n" for m in lines)), 20)
    answers = {m["id"]: m for m in map(orjson.loads, out.splitlines()) if "id" in m}
    assert answers[1]["result"]["protocolVersion"] == 1
    assert set(answers[2]["result"]) == {"modes", "configOptions"}  # the restored session's modes and config
    assert answers[3]["result"]["stopReason"] == "cancelled"
    assert proc.returncode == 0


async def test_sigterm_while_stdin_open_exits_cleanly(tmp_path: Path) -> None:
    """The lifecycle wrapper SIGTERMs an idle agent whose stdin is still open.

    It exits 0: interpreter shutdown must not abort it (SIGABRT, "Fatal Python
    error: _enter_buffered_busy"), as it would with the stdin reader thread still
    inside the buffered reader.
    """
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.toml").write_text(CONFIG)
    proc = await asyncio.create_subprocess_exec(
        *edge_agent_command(tmp_path / "cfg"), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ))
    p = Proc(proc)
    await p.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert (await p.read())["id"] == 1
    proc.send_signal(15)
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert b"Fatal Python error" not in err
    assert proc.returncode == 0


async def test_spec12_behind_the_edge_a_session_without_policy_is_refused(tmp_path: Path) -> None:
    """SPEC §12: launched as the edge launches it, the agent never decides a policy itself.

    session/new and a restoring session/resume without ``_meta.acpgate.policy``
    are -32602; with the edge's policy the same requests succeed.
    """
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = {"workspaceDir": str(ws), "autonomy": "full", "workspaceOnly": False}
    async with spawn(tmp_path, edge_agent_command) as p:
        await p.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": 1}})
        assert (await p.read())["id"] == 1
        await p.send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                      "params": {"cwd": str(ws), "mcpServers": []}})
        refused = await p.read()
        assert refused["id"] == 2 and refused["error"]["code"] == -32602
        assert refused["error"]["message"].startswith("Missing _meta.acpgate.policy")
        await p.send({"jsonrpc": "2.0", "id": 3, "method": "session/resume",
                      "params": {"sessionId": "s-old", "cwd": str(ws), "mcpServers": [],
                                 "_meta": {"acpgate": {"history": []}}}})
        refused = await p.read()
        assert refused["id"] == 3 and refused["error"]["code"] == -32602
        await p.send({"jsonrpc": "2.0", "id": 4, "method": "session/new",
                      "params": {"cwd": str(ws), "mcpServers": [],
                                 "_meta": {"acpgate": {"policy": policy}}}})
        sid = (await p.read())["result"]["sessionId"]
        # The demo model's commands follow the answer (the client knows the id by then).
        advertised = await p.read()
        assert advertised["method"] == "session/update" and \
            advertised["params"]["sessionId"] == sid
        assert advertised["params"]["update"]["sessionUpdate"] == "available_commands_update"
        await p.send({"jsonrpc": "2.0", "id": 5, "method": "session/resume",
                      "params": {"sessionId": "s-old", "cwd": str(ws), "mcpServers": [],
                                 "_meta": {"acpgate": {"history": [], "policy": policy}}}})
        resumed = await p.read()
        assert resumed["id"] == 5 and set(resumed["result"]) == {"modes", "configOptions"}


@pytest.mark.parametrize("command", [agent_command, edge_agent_command])
async def test_both_entry_points_report_the_package_version(tmp_path: Path, command: Any) -> None:
    """``agentInfo.version`` is the one acpgate version, whichever entry point started it."""
    from acpgate import __version__

    async with spawn(tmp_path, command) as p:
        await p.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": 1}})
        info = (await p.read())["result"]["agentInfo"]
    assert info["name"] == "acpgate-agent" and info["version"] == __version__
