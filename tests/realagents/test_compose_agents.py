"""docker-compose.agents.yml as host processes: a real Claude Code behind the compose gateway.

The compose topology with the agents override (:mod:`tests.gateway.compose_run`)
runs as host processes, with the tier's installed ``claude-agent-acp`` on the
lifecycle service's ``PATH`` (the `agents` image installs it globally) and its
model traffic on the tier's local fake provider. A token holder opens a
session of ``claude`` in a project under ``/workspace`` through the edge and
gets the fake model's streamed answer — the path a `docker compose -f
docker-compose.yml -f docker-compose.agents.yml up` user takes. The key given
in ``.env`` reaches the agent, and nothing else of the lifecycle service's
environment does.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from websockets.asyncio.client import connect

from services.common.config import load_config
from services.edge.tokens import TokenStore, token_db_path
from tests.e2e.harness import workspace_of
from tests.gateway.compose_run import AGENTS_OVERRIDE, load, merged, running
from tests.gateway.stack import RawClient, select
from tests.pg_cluster import Cluster
from tests.realagents.adapters import CLAUDE
from tests.realagents.fake_models import HELLO, FakeModelServer
from tests.security.procs import lease_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GRPC_TOKEN = "compose-agents-shared-token"
ANTHROPIC_KEY = "sk-ant-compose-fake-key"
#: A variable of the lifecycle service's environment that no agent may see.
UNRELATED = "COMPOSE_HOST_SECRET"


async def test_claude_behind_the_compose_gateway(tmp_path: Path, pg_cluster: Cluster,
                                                 npm_dir: Path,
                                                 model_server: FakeModelServer) -> None:
    if not CLAUDE.installed(npm_dir):
        pytest.skip(f"{CLAUDE.bin_name} is not installed in {npm_dir}")
    doc = merged(load(), load(AGENTS_OVERRIDE))
    compose_env = {"ACPGATE_GRPC_TOKEN": GRPC_TOKEN, "ACPGATE_PG_PASSWORD": pg_cluster.password,
                   "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    home = tmp_path / "agent-home"
    home.mkdir()
    bin_dir = CLAUDE.command(npm_dir).parent
    # What the image provides and an operator adds: the adapter on PATH, the provider's URL
    # (passed on by pass_env), a HOME for its state; as root, Claude Code must be told it
    # runs sandboxed (the image's user is not root).
    lifecycle_env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                     "ANTHROPIC_BASE_URL": model_server.url, "HOME": str(home),
                     UNRELATED: "must-not-reach-an-agent"}
    session_env = {"ACPGATE_agents__claude__env": '{ IS_SANDBOX = "1", '
                   'DISABLE_AUTOUPDATER = "1", DISABLE_TELEMETRY = "1" }'}
    extra = {"lifecycle": lifecycle_env, "lifecycle-b": lifecycle_env,
             "session": session_env}
    async with running(doc, tmp_path, pg_cluster, compose_env, extra) as top:
        edge_env = top.envs["edge"]
        cfg = load_config(Path(edge_env["ACPGATE_CONFIG_DIR"]), environ=edge_env)
        project = top.mapper.projects / "my-repo"
        project.mkdir()
        _, secret = TokenStore(token_db_path(cfg)).create("compose")
        url = f"ws://127.0.0.1:{cfg.gateway.port}/acp"
        async with connect(url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            client = RawClient(ws, select("allow-once"))
            await client.result("initialize", {"protocolVersion": 1})
            new = await client.result("session/new", {"agentAlias": "claude",
                                                      "cwd": str(project)})
            assert workspace_of(new) == str(project.resolve())
            seen, resp = await client.call("session/prompt", {
                "sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "hello"}]})
            assert resp["result"]["stopReason"] == "end_turn", resp
            text = "".join(m["params"]["update"]["content"].get("text", "") for m in seen
                           if m.get("method") == "session/update"
                           and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            assert "".join(HELLO) in text
            # The agent got its key from .env, and nothing else of the service's environment.
            lease = lease_of(cfg.data_dir / "lifecycle" / "leases.db",
                             f"agent:claude:acp:{new['sessionId']}")
            environ = psutil.Process(lease.adapter_pid).environ()
            assert environ.get("ANTHROPIC_API_KEY") == ANTHROPIC_KEY
            assert UNRELATED not in environ and "ACPGATE_GRPC_TOKEN" not in environ
            assert "ACPGATE_PG_PASSWORD" not in environ
            await client.result("session/close", {"sessionId": new["sessionId"]})
