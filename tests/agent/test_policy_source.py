"""Where a session's policy comes from (SPEC §12): the edge's, or standalone a local one.

Behind the edge the agent never decides a policy: a session that arrives without
``_meta.acpgate.policy`` is refused. Standalone (``acpgate agent``) the entry
point's local decision applies to the request's cwd.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from services.agent.policy_source import PolicySource
from services.common.config import Config
from services.common.jsonrpc import JsonRpcError
from services.common.policy import SecurityPolicy
from services.common.protocol import MSG_MISSING_POLICY
from tests.agent.harness import (
    TEST_VERSION,
    ScriptedProvider,
    call,
    make_config,
    running_agent,
    say,
)


async def test_spec12_behind_the_edge_no_policy_no_session(tmp_path: Path, ws: Path) -> None:
    """session/new and a restoring resume without a policy are -32602; nothing is created."""
    async with running_agent(make_config(tmp_path, autonomy="full"), standalone=False) as c:
        for meta in ({}, {"_meta": {"acpgate": {"policy": None}}}, {"_meta": {"acpgate": {}}}):
            with pytest.raises(JsonRpcError) as info:
                await c.call("session/new", {"cwd": str(ws), "mcpServers": [], **meta})
            assert (info.value.code, info.value.message) == (-32602, MSG_MISSING_POLICY)
        with pytest.raises(JsonRpcError) as info:
            await c.call("session/resume", {"sessionId": "old", "cwd": str(ws),
                                            "_meta": {"acpgate": {"history": []}}})
        assert (info.value.code, info.value.message) == (-32602, MSG_MISSING_POLICY)
        with pytest.raises(JsonRpcError) as info:
            await c.prompt("old", "hi")
        assert info.value.code == -32000  # the refused restore left no session behind
    assert c.updates == []


async def test_behind_the_edge_the_edge_policy_is_enforced(tmp_path: Path, ws: Path) -> None:
    """With the edge's policy the session works, under that policy (not the config's level)."""
    provider = ScriptedProvider([call("file_write", {"path": "x.txt", "content": "x"}),
                                 say("done")])
    policy = SecurityPolicy(workspace_dir=str(ws), autonomy="readonly").to_json()
    async with running_agent(make_config(tmp_path, autonomy="full"), provider,
                             standalone=False) as c:
        init = await c.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = await c.new_session(ws, policy=policy)
        assert (await c.prompt(sid, "write"))["stopReason"] == "end_turn"
        # A session this process knows resumes without the policy being sent again.
        resumed = await c.call("session/resume", {"sessionId": sid, "cwd": str(ws)})
        assert set(resumed) == {"modes", "configOptions"}
    assert init["agentInfo"]["version"] == TEST_VERSION
    assert not (ws / "x.txt").exists()
    (update,) = c.of("tool_call_update")
    assert update["status"] == "failed" and "readonly" in update["rawOutput"]


async def test_standalone_local_policy_decides_for_the_real_cwd(tmp_path: Path,
                                                               ws: Path) -> None:
    """Standalone: the local decision gets (cfg, alias, real cwd); a _meta policy still wins."""
    cfg = make_config(tmp_path)
    seen: list[tuple[Config, str, str]] = []

    def local(c: Config, alias: str, workspace_dir: str) -> SecurityPolicy:
        seen.append((c, alias, workspace_dir))
        return SecurityPolicy(workspace_dir=workspace_dir, autonomy="readonly")

    link = tmp_path / "link-to-ws"
    link.symlink_to(ws)
    source = PolicySource(cfg, "a", local)
    decided = await source.resolve(None, str(link))
    assert decided == SecurityPolicy(workspace_dir=str(ws), autonomy="readonly")
    assert seen == [(cfg, "a", str(ws))]
    home = await source.resolve(None, "  ")  # no cwd: the agent workspace, created
    assert Path(home.workspace_dir) == cfg.agent_workspace("a").resolve()
    assert await asyncio.to_thread(os.path.isdir, home.workspace_dir)
    sent: dict[str, Any] = {"workspaceDir": str(ws), "autonomy": "full"}
    assert (await source.resolve(sent, str(link))).autonomy == "full"
    assert len(seen) == 2
    with pytest.raises(JsonRpcError) as info:
        await source.resolve({"workspaceDir": str(ws), "autonomy": "yolo"}, str(ws))
    assert info.value.code == -32602
    assert info.value.message.startswith("Invalid _meta.acpgate.policy: policy.autonomy")
    with pytest.raises(JsonRpcError) as info:
        await PolicySource(cfg, "a").resolve(None, str(ws))
    assert (info.value.code, info.value.message) == (-32602, MSG_MISSING_POLICY)
