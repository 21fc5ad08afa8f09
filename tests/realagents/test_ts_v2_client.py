"""acpgate driven by the official TypeScript SDK's v2 client (``experimental/v2`` of
``@agentclientprotocol/sdk``), over stdio, Streamable HTTP and WebSocket.

``ts_v2_client.mjs`` imports only the SDK (which validates every message it reads
against its v2 types): initialize with protocol 2, session/new, a prompt whose shell tool
asks permission, run to its idle ``state_update``, session/close — on the built-in agent,
a v1 agent acpgate translates for the client.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import child_env, workspace_beside_config
from tests.gateway.stack import full_stack
from tests.gateway.wsfixtures import mint, write_config

pytestmark = pytest.mark.timeout(240)

SCRIPT = Path(__file__).with_name("ts_v2_client.mjs")


async def _run(npm_dir: Path, args: list[str]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    proc = await asyncio.create_subprocess_exec(
        node, "--experimental-websocket", str(SCRIPT), str(npm_dir), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**child_env(), "ACPGATE_PYTHON": sys.executable})
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()[-3000:]
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def _check(out: dict[str, Any]) -> None:
    assert out["protocolVersion"] == 2 and out["agentName"] == "acpgate"
    assert out["messageId"] and out["echoed"], "the prompt's message echoed with its id"
    assert out["stopReason"] == "end_turn" and "ts-v2-ok" in out["text"]
    assert out["permissions"] == [{"title": "Approve shell?", "subject": "tool_call"}]
    assert "tool_call_update" in out["kinds"] and "tool_call" not in out["kinds"]
    assert out["modeOption"], "the agent's modes came as a mode config option"


async def test_ts_v2_client_over_stdio(npm_dir: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    _check(await _run(npm_dir, ["stdio", str(cfg.config_dir), "-",
                                str(workspace_beside_config(tmp_path))]))


@pytest.mark.parametrize("mode", ["http", "ws"])
async def test_ts_v2_client_through_the_gateway(npm_dir: Path, tmp_path: Path,
                                                mode: str) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    async with full_stack(cfg) as st:
        url = st.edge.http_url if mode == "http" else st.edge.url
        _check(await _run(npm_dir, [mode, url, secret, str(workspace_beside_config(tmp_path))]))
