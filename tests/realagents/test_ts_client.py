"""acpgate driven by a client built on the official ACP TypeScript SDK, over stdio and the gateway.

``ts_client.mjs`` (Node, ``@agentclientprotocol/sdk`` from the tier's npm
cache) spawns ``acpgate acp`` or ``acpgate bridge`` and runs initialize,
session/new, a prompt whose shell tool asks permission, session/list and
session/close; then a prompt to the closed session must fail with -32000.
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
from tests.gateway.wsfixtures import served_for_bridge, write_config

pytestmark = pytest.mark.timeout(240)

SCRIPT = Path(__file__).with_name("ts_client.mjs")
ACPGATE = [sys.executable, "-m", "acpgate"]


async def _run(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    proc = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), str(cwd), "!echo ts-sdk-ok", *command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()[-3000:]
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def _check(out: dict[str, Any]) -> None:
    assert out["protocolVersion"] == 1 and out["agentName"] == "acpgate"
    assert out["stopReason"] == "end_turn"
    assert "ts-sdk-ok" in out["text"]
    assert out["permissions"], "the shell tool asked through the client"
    assert out["sessionId"] in out["listed"]
    assert out["afterClose"]["code"] == -32000


async def test_ts_sdk_client_over_stdio(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    _check(await _run([*ACPGATE, "acp", "--config-dir", str(cfg.config_dir)],
                      workspace_beside_config(tmp_path), child_env()))


async def test_ts_sdk_client_through_the_gateway(tmp_path: Path) -> None:
    cfg_dir = tmp_path / "cfg"
    async with served_for_bridge(cfg_dir) as token:
        _check(await _run([*ACPGATE, "bridge", "--config-dir", str(cfg_dir)],
                          workspace_beside_config(tmp_path),
                          {**child_env(), "ACPGATE_ACP_BRIDGE_TOKEN": token}))
