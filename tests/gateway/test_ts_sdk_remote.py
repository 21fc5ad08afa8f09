"""acpgate driven by the official TypeScript SDK's remote clients: Streamable HTTP and WebSocket.

``ts_remote_client.mjs`` uses ``@agentclientprotocol/sdk``'s
``experimental/http-client`` and ``experimental/ws-client`` against a real gateway
(session and lifecycle services, the built-in demo agent as a real process):
initialize, session/new, a prompt whose shell tool asks permission, a prompt
cancelled while its permission is pending, session/list, session/close, then on a
new connection session/load and a prompt. Skips, saying why, without node or the SDK.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import workspace_beside_config
from tests.gateway.sdk_dirs import ts_sdk_dir
from tests.gateway.stack import full_stack
from tests.gateway.wsfixtures import mint, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCRIPT = Path(__file__).with_name("ts_remote_client.mjs")


async def _run(mode: str, tmp_path: Path) -> dict[str, Any]:
    sdk = ts_sdk_dir()
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    cwd = workspace_beside_config(tmp_path)
    async with full_stack(cfg) as st:
        url = st.edge.http_url if mode == "http" else st.edge.url
        node = shutil.which("node")
        assert node is not None
        proc = await asyncio.create_subprocess_exec(
            node, "--experimental-websocket", str(SCRIPT), str(sdk), mode, url, secret, str(cwd),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 150)
        assert proc.returncode == 0, err.decode()[-3000:]
        # Every connection the client opened is gone again (DELETE / close).
        assert not st.edge.http.connections
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def _check(out: dict[str, Any]) -> None:
    assert out["protocolVersion"] == 1 and out["agentName"] == "acpgate"
    assert out["loadSession"] is True
    assert out["stopReason"] == "end_turn" and "ts-remote-ok" in out["text"]
    assert len(out["permissions"]) == 2, "both shell prompts asked through the client"
    assert out["cancelled"] == "cancelled"
    assert out["sessionId"] in out["listed"]
    reload = out["reload"]
    assert reload["replayed"] > 0, "session/load replayed the stored conversation"
    assert reload["stopReason"] == "end_turn" and "after the reload" in reload["text"]


async def test_typescript_sdk_over_streamable_http(tmp_path: Path) -> None:
    _check(await _run("http", tmp_path))


async def test_typescript_sdk_over_websocket(tmp_path: Path) -> None:
    _check(await _run("ws", tmp_path))
