"""A line over the limit is answered, skipped without being held, and wedges nothing.

A 100 MB stdio line got no answer at all. Every line reader must answer an
over-long line — a parse error with id null, "line too long (<n> bytes, limit
<m>)" — skip it up to its newline without buffering it whole, and go on with the
next line:

- ``acpgate acp``'s stdin (the client's requests; limit 64 MiB);
- ``acpgate bridge``'s stdin: a line over the gateway's ``max_frame_bytes`` would
  make the gateway close the connection, so the bridge answers it itself;
- the built-in agent's stdin (``acpgate agent`` under an editor);
- an adapter's stdout, read by the lifecycle service: an agent that writes a line
  over the limit (here, the answer to a prompt) must not leave that prompt waiting
  forever — it is answered with an error saying why, and the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from services.common.jsonrpc import MAX_LINE_BYTES
from services.lifecycle.attach.channel import MAX_LINE_BYTES as ADAPTER_LINE_LIMIT
from tests.e2e.harness import ACPGATE, child_env, write_config
from tests.gateway.stack import full_stack
from tests.gateway.wsfixtures import mint
from tests.gateway.wsfixtures import write_config as write_gateway_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MB = 1_000_000
WAIT = 120.0


def too_long(n: int, limit: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32700, "message": f"Parse error: line too long ({n} bytes, limit {limit})"}}


def big_request(size: int, req_id: int = 7) -> bytes:
    """A request line of exactly ``size`` bytes (a prompt for a session that does not exist)."""
    head = b'{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"x","prompt":"' \
        % req_id
    tail = b'"}}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


class Lines:
    """A child process spoken to in JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), WAIT)
        assert line, "the process closed stdout"
        return dict(json.loads(line))

    async def answer(self, req_id: Any) -> dict[str, Any]:
        while True:
            msg = await self.read()
            if msg.get("id") == req_id and "method" not in msg:
                return msg

    async def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return await asyncio.wait_for(self.proc.wait(), WAIT)


@contextlib.asynccontextmanager
async def started(*argv: str) -> AsyncIterator[Lines]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=child_env(), limit=64 * 1024 * 1024)
    try:
        yield Lines(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def peak_mb(pid: int) -> float:
    """The process's peak RSS (VmHWM) in MB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")


async def test_acp_stdin_answers_a_200_mb_line_without_holding_it(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    async with started(*ACPGATE, "acp", "--config-dir", str(cfg)) as acp:
        await acp.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}')
        assert "result" in await acp.answer(1)
        pid = acp.proc.pid
        before = psutil.Process(pid).memory_info().rss / 2**20
        reset_peak(pid)
        size = 200 * MB
        await acp.write(big_request(size))
        assert await acp.read() == too_long(size, MAX_LINE_BYTES)
        # Never the whole line: at most about the limit was held while it was skipped.
        assert peak_mb(pid) - before < 150, (before, peak_mb(pid))
        await acp.write(b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}')
        assert (await acp.answer(2))["result"] == {"sessions": []}
        assert await acp.close() == 0


async def test_agent_stdin_answers_a_100_mb_line(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    async with started(*ACPGATE, "agent", "--config-dir", str(cfg), "--alias", "demo") as agent:
        size = 100 * MB
        await agent.write(big_request(size))
        assert await agent.read() == too_long(size, MAX_LINE_BYTES)
        await agent.write(b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}')
        assert (await agent.answer(2))["result"]["protocolVersion"] == 1
        assert await agent.close() == 0


async def test_bridge_answers_a_line_the_gateway_would_refuse(tmp_path: Path) -> None:
    cfg = write_gateway_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    async with full_stack(cfg) as stack:
        bridge_dir = tmp_path / "bridge"
        bridge_dir.mkdir()
        (bridge_dir / "config.toml").write_text(
            f'[gateway]\nhost = "127.0.0.1"\nport = {stack.edge.port}\n')
        (bridge_dir / "acp-bridge-token").write_text(secret + "\n")
        async with started(*ACPGATE, "bridge", f"--config-dir={bridge_dir}") as bridge:
            await bridge.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}')
            assert "result" in await bridge.answer(1)
            size = 100 * MB
            await bridge.write(big_request(size))
            assert await bridge.read() == too_long(size, cfg.gateway.max_frame_bytes)
            # The connection is still up: the next request goes through the gateway.
            await bridge.write(b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{}}')
            assert "sessionId" in (await bridge.answer(2))["result"]
            assert await bridge.close() == 0


#: An ACP agent (raw JSON lines) whose answer to session/prompt is one line over the
#: lifecycle service's limit; it then waits for more input (a later turn would work).
BIG_ANSWER_AGENT = r"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}}
    elif method == "session/new":
        result = {"sessionId": "big-1"}
    elif method == "session/prompt":
        result = {"stopReason": "end_turn", "_meta": {"pad": "p" * PAD}}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()
""".replace("PAD", str(ADAPTER_LINE_LIMIT + 8 * MB))


async def test_an_agent_line_over_the_limit_fails_its_request_and_ends_the_session(
        tmp_path: Path) -> None:
    script = tmp_path / "big_answer_agent.py"
    script.write_text(BIG_ANSWER_AGENT)
    extra = (f'\n[agents.big]\nkind = "acp"\ncommand = {json.dumps(sys.executable)}\n'
             f'args = [{json.dumps(str(script))}]\n')
    cfg = write_config(tmp_path / "cfg", extra=extra)
    work = tmp_path / "work"
    work.mkdir()
    async with started(*ACPGATE, "acp", "--config-dir", str(cfg)) as acp:
        await acp.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {
            "agentAlias": "big", "cwd": str(work)}}).encode())
        sid = (await acp.answer(1))["result"]["sessionId"]
        await acp.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                    "params": {"sessionId": sid, "prompt": "hi"}}).encode())
        error = (await acp.answer(2))["error"]
        assert error["code"] == -32603
        assert error["message"] == (
            f"Prompt failed: the agent wrote a message over the {ADAPTER_LINE_LIMIT}-byte "
            "line limit; its session was ended")
        # The session is over (loadable again), the connection goes on.
        await acp.write(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                                    "params": {"sessionId": sid, "prompt": "again"}}).encode())
        assert (await acp.answer(3))["error"]["code"] == -32000
        await acp.write(b'{"jsonrpc":"2.0","id":4,"method":"session/list","params":{}}')
        assert [s["sessionId"] for s in (await acp.answer(4))["result"]["sessions"]] == [sid]
        assert await acp.close() == 0
