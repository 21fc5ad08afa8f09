"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

Reads the compose files and the Dockerfile and checks the deployment rules (one
container per service from one build, the state volume and the projects dir
mounted in every acpgate container, healthchecks, restart policy, non-root
image bound to every interface, ports only for the edges, the official postgres
image with its own volume, the `agents` image target and override) and that
every ``ACPGATE_*`` name they set is one the configuration knows. Then runs
the topology as host processes (:mod:`tests.gateway.compose_run`) and drives a
session in a project under ``/workspace`` through the edge; the services talk
TCP with the shared token, as in compose. The ``second-host`` profile's
lifecycle and edge run too: a session created through the first edge, closed,
is loaded through the second. The same run with the real agents of the tier is
``tests/realagents/test_compose_agents.py``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import grpc
import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.session.v1 import session_pb2, session_pb2_grpc
from services.common.config import load_config
from services.common.config.load import ENV_PREFIX
from services.common.config.schema import SECTIONS, AgentSection, field_types
from services.edge.tokens import TokenStore, token_db_path
from tests.gateway.compose_run import (
    AGENTS_OVERRIDE,
    EDGES,
    POSTGRES,
    PROJECTS_TARGET,
    REPO,
    SECOND_HOST,
    SERVICES,
    Mapper,
    load,
    merged,
    running,
    state_target,
    volume_parts,
)
from tests.pg_cluster import Cluster

from .stack import RawClient, select

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GRPC_TOKEN = "compose-smoke-shared-token"
DOCKERFILE = REPO / "Dockerfile"


def _stages(dockerfile: str) -> list[str]:
    return re.findall(r"^FROM\s+\S+(?:\s+AS\s+(\S+))?", dockerfile, re.M | re.I)


def test_compose_deployment_rules() -> None:
    doc = load()
    services = doc["services"]
    assert set(services) == {*SERVICES, *SECOND_HOST, POSTGRES}
    assert all(services[n].get("profiles") == ["second-host"] for n in SECOND_HOST)
    assert not any("profiles" in services[n] for n in (*SERVICES, POSTGRES))
    volume_names = set(doc["volumes"])
    state = state_target(doc)
    acpgate = [n for n in services if n != POSTGRES]
    for name, svc in services.items():
        assert svc["restart"] in ("always", "unless-stopped", "on-failure")
        assert svc["healthcheck"]["test"][0] == "CMD"
        assert ("ports" in svc) == (name in EDGES), "only the edges publish a port"
        if name == POSTGRES:
            continue
        assert svc["entrypoint"] == ["acpgate"]
        mounts = {target: source for source, target in map(volume_parts, svc["volumes"])}
        # The state volume and the projects dir, in every acpgate container alike.
        assert mounts == {state: "acpgate-data",
                          PROJECTS_TARGET: "${ACPGATE_PROJECTS_DIR:-./workspace}"}, name
        assert "acpgate-data" in volume_names
        assert not PROJECTS_TARGET.startswith(state + "/") and not state.startswith(
            PROJECTS_TARGET + "/"), "projects never inside acpgate's state, nor the reverse"
    # One build: the session service's; every acpgate service runs its image.
    builders = [n for n in acpgate if "build" in services[n]]
    assert builders == ["session"] and services["session"]["build"]["target"] == "lean"
    assert {services[n]["image"] for n in acpgate} == {services["session"]["image"]}
    pg = services[POSTGRES]
    assert pg["image"].startswith("postgres:")
    assert pg["healthcheck"]["test"][1] == "pg_isready"
    pg_volumes = {volume_parts(v)[0] for v in pg["volumes"]}
    assert pg_volumes <= volume_names and "acpgate-data" not in pg_volumes
    session_env = services["session"]["environment"]
    assert session_env["ACPGATE_store__url"].startswith("postgresql://")
    assert "@postgres:5432/" in session_env["ACPGATE_store__url"]
    assert ":" not in session_env["ACPGATE_store__url"].split("//", 1)[1].split("@")[0], \
        "no password in the URL: it comes from [store] password_env"
    assert services["session"]["depends_on"] == {POSTGRES: {"condition": "service_healthy"}}
    assert services["edge"]["depends_on"] == {
        "session": {"condition": "service_healthy"},
        "lifecycle": {"condition": "service_healthy"},
    }
    assert services["edge-b"]["depends_on"] == {
        "session": {"condition": "service_healthy"},
        "lifecycle-b": {"condition": "service_healthy"},
    }


def test_the_agents_override_switches_every_service_to_the_agents_image() -> None:
    doc = merged(load(), load(AGENTS_OVERRIDE))
    services = doc["services"]
    acpgate = [n for n in services if n != POSTGRES]
    assert services["session"]["build"] == {"context": ".", "target": "agents"}
    assert {services[n]["image"] for n in acpgate} == {"acpgate:agents"}
    for alias, command in (("claude", "claude-agent-acp"), ("codex", "codex-acp")):
        for name in acpgate:
            env = services[name]["environment"]
            assert env[f"ACPGATE_agents__{alias}__kind"] == "acp"
            assert env[f"ACPGATE_agents__{alias}__command"] == command
    # The keys reach only the processes that start agents or authenticate them.
    for name in acpgate:
        has_keys = "ANTHROPIC_API_KEY" in services[name]["environment"]
        assert has_keys == (name != "session"), name
    # Each key goes on to its own agent only (pass_env), nothing else of the container's.
    env = services["lifecycle"]["environment"]
    assert "ANTHROPIC_API_KEY" in env["ACPGATE_agents__claude__pass_env"].split(",")
    assert "OPENAI_API_KEY" not in env["ACPGATE_agents__claude__pass_env"].split(",")


def test_dockerfile_image_targets_health_and_runtime_dependencies() -> None:
    dockerfile = DOCKERFILE.read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert users and not users[-1].startswith(("root", "0")), "the image runs as a non-root user"
    assert 'ENTRYPOINT ["acpgate"]' in dockerfile
    stages = _stages(dockerfile)
    assert "agents" in stages and stages[-1] == "lean", "lean stays the default (last) target"
    assert re.search(r"^HEALTHCHECK .*CMD .*/healthz", dockerfile, re.M | re.S)
    assert "ACPGATE_gateway__host=0.0.0.0" in dockerfile, "reachable from outside by default"
    assert re.search(r"^VOLUME \[\"" + re.escape(PROJECTS_TARGET) + r"\"\]", dockerfile, re.M)
    # The agents target installs exactly the tier's pinned adapters.
    assert "tests/realagents/packages.txt" in dockerfile
    assert "!tests/realagents/packages.txt" in (REPO / ".dockerignore").read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]]
    assert "grpcio-tools" not in runtime, "the code generator is not a runtime dependency"
    assert any(d.startswith("grpcio-tools==") for d in project["optional-dependencies"]["dev"])


def test_every_acpgate_variable_of_the_compose_files_is_a_config_key() -> None:
    names = set()
    for path in (REPO / "docker-compose.yml", AGENTS_OVERRIDE):
        names |= set(re.findall(r"\b(" + ENV_PREFIX + r"\w+__\w+)\b", path.read_text()))
    names |= set(re.findall(r"\b(" + ENV_PREFIX + r"\w+__\w+)=", DOCKERFILE.read_text()))
    assert names
    agent_keys = set(field_types(AgentSection))
    for name in names:
        parts = name[len(ENV_PREFIX):].split("__")
        if parts[0] == "agents":
            assert len(parts) == 3 and parts[2] in agent_keys, name
        else:
            section, key = ".".join(parts[:-1]), parts[-1]
            assert section in SECTIONS and key in field_types(SECTIONS[section]), name


def test_docs_describe_the_container_deployment() -> None:
    page = (REPO / "docs" / "deployment.md").read_text()
    for needle in ("docker-compose.agents.yml", "ACPGATE_PROJECTS_DIR", PROJECTS_TARGET,
                   "docker build --target agents", "TLS"):
        assert needle in page, needle


async def test_compose_smoke_as_host_processes(tmp_path: Path, pg_cluster: Cluster) -> None:
    doc = load()
    with pytest.raises(AssertionError, match="ACPGATE_GRPC_TOKEN"):
        Mapper(doc, tmp_path, tmp_path).env(doc["services"]["session"]["environment"], {})
    with pytest.raises(AssertionError, match="ACPGATE_PG_PASSWORD"):
        Mapper(doc, tmp_path, tmp_path).env(doc["services"]["session"]["environment"],
                                            {"ACPGATE_GRPC_TOKEN": GRPC_TOKEN})
    compose_env = {"ACPGATE_GRPC_TOKEN": GRPC_TOKEN, "ACPGATE_PG_PASSWORD": pg_cluster.password}
    async with running(doc, tmp_path, pg_cluster, compose_env) as top:
        edge_env = top.envs["edge"]
        cfg = load_config(Path(edge_env["ACPGATE_CONFIG_DIR"]), environ=edge_env)
        cfg_b = load_config(Path(top.envs["edge-b"]["ACPGATE_CONFIG_DIR"]),
                            environ=top.envs["edge-b"])
        data = top.mapper.data
        assert cfg.data_dir.is_relative_to(data) and cfg_b.data_dir.is_relative_to(data)
        assert cfg.data_dir != cfg_b.data_dir, "the second host has its own data dir"
        assert token_db_path(cfg) == token_db_path(cfg_b), "and reads the same tokens"
        assert cfg.services.session_addr.startswith("127.0.0.1:")  # TCP, as in compose
        # A project a client works in: /workspace/<repo>, the mounted projects dir.
        project = top.mapper.projects / "my-repo"
        project.mkdir()
        # `docker compose exec edge acpgate token create`: the same store the edge reads.
        _, secret = TokenStore(token_db_path(cfg)).create("compose")
        headers = {"Authorization": f"Bearer {secret}"}
        url = f"ws://127.0.0.1:{cfg.gateway.port}/acp"
        async with connect(url, proxy=None, additional_headers=headers) as ws:
            client = RawClient(ws, select("allow-once"))
            init = await client.result("initialize", {"protocolVersion": 1})
            assert init["_meta"]["zeroclaw"]["defaultModel"] == "demo/demo"
            assert init["agentCapabilities"]["loadSession"] is True  # PostgreSQL, persistent
            new = await client.result("session/new", {"cwd": str(project)})
            assert new["workspaceDir"] == str(project.resolve())
            res = await client.result("session/prompt",
                                      {"sessionId": new["sessionId"], "prompt": "!echo compose"})
            assert res["stopReason"] == "end_turn" and "compose" in res["content"]
            assert [r["id"] for r in client.requests] == ["zc-out-0"]
            # acpgate's own state is no session's workspace.
            _, refused = await client.call("session/new", {"cwd": str(cfg.data_dir)})
            assert refused["error"]["code"] == -32602, refused
            await client.result("session/close", {"sessionId": new["sessionId"]})
        # The second host loads it: the rows are in PostgreSQL, the token file is shared.
        url_b = f"ws://127.0.0.1:{cfg_b.gateway.port}/acp"
        async with connect(url_b, proxy=None, additional_headers=headers) as ws:
            client = RawClient(ws, select("allow-once"))
            seen, resp = await client.call("session/load", {"sessionId": new["sessionId"]})
            assert set(resp["result"]) == {"modes", "configOptions"}
            assert any(m.get("method") == "session/update" for m in seen)

        # The shared token guards the gRPC services over TCP.
        for token, ok in ((None, False), (GRPC_TOKEN, True)):
            async with grpc.aio.insecure_channel(cfg.services.session_addr) as channel:
                stub = session_pb2_grpc.SessionServiceStub(channel)
                md = (("authorization", f"Bearer {token}"),) if token else None
                try:
                    status = await stub.GetStoreStatus(session_pb2.GetStoreStatusRequest(),
                                                       metadata=md, timeout=10)
                    assert ok
                    assert status.backend == "postgresql" and status.persistent
                    assert pg_cluster.password not in status.db_path
                except grpc.aio.AioRpcError as exc:
                    assert not ok and exc.code() == grpc.StatusCode.UNAUTHENTICATED
    for log in top.logs.values():
        text = log.read_text()
        for secret_text in (GRPC_TOKEN, secret, pg_cluster.password):
            assert secret_text not in text, f"a secret leaked into {log.name}"
