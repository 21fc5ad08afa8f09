"""``acpgate acp`` exits cleanly however it ends.

Every exit printed ``Exception in callback SubprocessStreamProtocol.pipe_connection_lost
… InvalidStateError`` (the lifecycle service's wait for an adapter's stdin to close,
cancelled, left the pipe's own future cancelled: Python 3.11's subprocess protocol then
resolved it again), and an exit during a session's setup printed ``Future exception was
never retrieved … AdapterGone`` (the attach confirmation nobody waited for any more).
Over real pipes, through each way a session can be cut short — EOF idle, with a session
open, in the middle of a turn; SIGTERM idle, with a session open, in the middle of a turn,
in the middle of a ``session/new`` — acpgate exits 0, leaves no process behind, and its
stderr holds no traceback.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.harness import ACPGATE, REPO, child_env, workspace_beside_config, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: What must never reach stderr on an exit.
NOISE = ("Traceback", "Exception in callback", "Future exception was never retrieved",
         "Task was destroyed", "InvalidStateError")
WAIT = 60.0
#: A stdio MCP server that starts and never answers: session/new waits for it.
SLOW_MCP = "import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\ntime.sleep(120)\n"


class Acp:
    """``acpgate acp`` over real pipes: JSON lines in, JSON lines out, stderr kept whole."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._ids = iter(range(1, 1_000_000))
        assert proc.stderr is not None
        self.stderr = asyncio.ensure_future(proc.stderr.read())

    @classmethod
    async def start(cls, config_dir: Path) -> Acp:
        proc = await asyncio.create_subprocess_exec(
            *ACPGATE, "acp", "--config-dir", str(config_dir), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env(),
            cwd=str(REPO))
        return cls(proc)

    async def send(self, method: str, params: dict[str, Any]) -> int:
        assert self.proc.stdin is not None
        rid = next(self._ids)
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        return rid

    async def until(self, pred: Any) -> dict[str, Any]:
        """The first message ``pred`` accepts."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), WAIT)
            assert line, "acpgate acp closed stdout"
            msg = json.loads(line)
            if pred(msg):
                return dict(msg)

    async def result(self, method: str, params: dict[str, Any]) -> Any:
        rid = await self.send(method, params)
        msg = await self.until(lambda m: m.get("id") == rid and "method" not in m)
        assert "result" in msg, msg
        return msg["result"]

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    async def end(self, how: str) -> tuple[int, str]:
        """EOF on stdin, or SIGTERM; the exit code and the whole stderr."""
        if how == "eof":
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        else:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stdout is not None
        await asyncio.wait_for(self.proc.stdout.read(), WAIT)  # answers still go out
        code = await asyncio.wait_for(self.proc.wait(), WAIT)
        return code, (await asyncio.wait_for(self.stderr, WAIT)).decode(errors="replace")


async def turn_running(acp: Acp, sid: str, command: str) -> None:
    """Start a prompt whose shell command runs until it is cut short; return once it runs."""
    await acp.send("session/prompt", {"sessionId": sid, "prompt": f"!{command}"})
    await acp.until(lambda m: m.get("method") == "session/update"
                    and m["params"]["update"].get("sessionUpdate") == "tool_call")


@pytest.mark.parametrize("how", ["eof", "sigterm"])
@pytest.mark.parametrize("when", ["idle", "session-open", "mid-turn", "mid-setup",
                                  "setup-start"])
async def test_every_exit_is_clean(tmp_path: Path, how: str, when: str) -> None:
    if when in ("mid-setup", "setup-start") and how == "eof":
        pytest.skip("EOF lets a session/new finish (the drain); SIGTERM cuts it short")
    config = write_config(tmp_path / "cfg", autonomy="full")
    work = workspace_beside_config(tmp_path)
    acp = await Acp.start(config)
    # Ready (signal handlers in place) once initialize is answered.
    await acp.result("initialize", {"protocolVersion": 1})
    if when in ("session-open", "mid-turn"):
        sid = (await acp.result("session/new", {"agentAlias": "demo", "cwd": str(work)}))[
            "sessionId"]
        if when == "mid-turn":  # EOF lets the turn finish (a short one); SIGTERM cancels it
            await turn_running(acp, sid, "sleep 2" if how == "eof" else "sleep 60")
    elif when == "setup-start":  # as its adapter is being spawned and attached, mostly
        await acp.send("session/new", {"agentAlias": "sdk", "cwd": str(work)})
    elif when == "mid-setup":
        marker = tmp_path / "mcp-started"
        await acp.send("session/new", {"agentAlias": "demo", "cwd": str(work), "mcpServers": [
            {"name": "slow", "command": sys.executable, "args": ["-c", SLOW_MCP, str(marker)],
             "env": []}]})
        for _ in range(int(WAIT * 20)):
            if marker.exists():
                break
            await asyncio.sleep(0.05)
        assert marker.exists(), "the slow MCP server never started"
    started = acp.descendants()
    code, stderr = await acp.end(how)
    assert code == 0, stderr[-3000:]
    noisy = [line for line in stderr.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, stderr[-6000:]
    _, alive = psutil.wait_procs(started, timeout=10)
    assert not alive, f"left behind: {alive}"
