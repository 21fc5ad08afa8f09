"""acpgate driven by a client built on the official ACP Python SDK, over stdio and the gateway.

The SDK's own client connection spawns ``acpgate acp`` (stdio) or ``acpgate
bridge`` (stdio to a real ``acpgate serve`` gateway over WebSocket) and runs a
session: initialize, session/new, a prompt whose tool asks permission (relayed
to this client), session/fork, session/list, session/close. The SDK
validates every message against its schema, so a frame acpgate got wrong fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from acp import connect_to_agent, spawn_stdio_transport, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    RequestPermissionResponse,
)

from tests.e2e.harness import child_env, workspace_beside_config
from tests.gateway.wsfixtures import served_for_bridge, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ACPGATE = [sys.executable, "-m", "acpgate"]


class SdkClient:
    """The client side: collects updates, allows every permission request once."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permissions: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.permissions.append(str(tool_call.title))
        allow = next(o for o in options if o.kind.startswith("allow"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    def on_connect(self, conn: Any) -> None:
        pass

    def text(self) -> str:
        return "".join(getattr(getattr(u, "content", None), "text", "") for u in self.updates
                       if getattr(u, "session_update", "") == "agent_message_chunk")


async def _session(command: list[str], env: dict[str, str], cwd: Path) -> tuple[SdkClient, Any]:
    client = SdkClient()
    async with spawn_stdio_transport(*command, env=env) as (reader, writer, _process):
        conn = connect_to_agent(client, writer, reader)  # type: ignore[arg-type]
        try:
            init = await conn.initialize(
                protocol_version=1,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
                    terminal=False),
                client_info=Implementation(name="py-sdk-client", version="1"))
            assert init.protocol_version == 1 and init.agent_info is not None
            assert init.agent_capabilities.session_capabilities.fork is not None
            session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
            result = await conn.prompt(session_id=session.session_id,
                                       prompt=[text_block("!echo py-sdk-ok")])
            forked = await conn.fork_session(session_id=session.session_id, cwd=str(cwd))
            listed = await conn.list_sessions()
            await conn.close_session(session_id=forked.session_id)
            await conn.close_session(session_id=session.session_id)
        finally:
            await conn.close()
    rows = {s.session_id: s for s in listed.sessions}
    assert session.session_id in rows
    assert forked.field_meta == {"acpgate": {"forkedFrom": session.session_id}}
    fork_meta = rows[forked.session_id].field_meta
    assert fork_meta is not None and fork_meta["acpgate"]["forkedFrom"] == session.session_id
    return client, result


async def test_python_sdk_client_over_stdio(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    client, result = await _session([*ACPGATE, "acp", "--config-dir", str(cfg.config_dir)],
                                    child_env(), workspace_beside_config(tmp_path))
    assert result.stop_reason == "end_turn"
    assert client.permissions, "the demo agent's shell tool asked through the client"
    assert "py-sdk-ok" in client.text()


async def test_python_sdk_client_through_the_gateway(tmp_path: Path) -> None:
    cfg_dir = tmp_path / "cfg"
    async with served_for_bridge(cfg_dir) as token:
        client, result = await _session([*ACPGATE, "bridge", "--config-dir", str(cfg_dir)],
                                        {**child_env(), "ACPGATE_ACP_BRIDGE_TOKEN": token},
                                        workspace_beside_config(tmp_path))
    assert result.stop_reason == "end_turn"
    assert client.permissions
    assert "py-sdk-ok" in client.text()
