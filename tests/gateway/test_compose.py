"""docker-compose.yml smoke test without a Docker engine.

Reads the compose file, checks the deployment rules (one container per
service, shared volume, healthchecks, restart policy, non-root image, ports
only for the edges, the official postgres image with its own volume), then
starts each acpgate service's entrypoint + command with its environment as
host processes — container paths mapped to a temp dir, service host names and
ports mapped to free local ports — waits on each service's own healthcheck
command in `depends_on` order, and drives a session through the edge. The
services talk TCP with the shared-token interceptor, as in compose.

The ``postgres`` service is the session's throwaway cluster: the compose
user's database is created in it, ``postgres:5432`` maps to its TCP port,
``ACPGATE_PG_PASSWORD`` is its password, and its healthcheck (``pg_isready``)
runs against it. The ``second-host`` profile's lifecycle and edge run too: a
session created through the first edge, closed, is loaded through the second.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import yaml
from websockets.asyncio.client import connect

from acpgate.session.v1 import session_pb2, session_pb2_grpc
from services.common.config import load_config
from services.edge.tokens import TokenStore, token_db_path
from tests.pg_cluster import SUPERUSER, Cluster

from .stack import RawClient, select

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
#: The acpgate services of the default deployment, and of the second-host profile.
SERVICES = ("session", "lifecycle", "edge")
SECOND_HOST = ("lifecycle-b", "edge-b")
POSTGRES = "postgres"
EDGES = ("edge", "edge-b")
GRPC_TOKEN = "compose-smoke-shared-token"


def load_compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose variable interpolation: ${V}, ${V:-default}, ${V:?error}."""
    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg or ""
        if op == ":?":
            raise AssertionError(f"compose would refuse to start: {arg}")
        return ""

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", sub, value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_compose_deployment_rules() -> None:
    doc = load_compose()
    services = doc["services"]
    assert set(services) == {*SERVICES, *SECOND_HOST, POSTGRES}
    assert all(services[n].get("profiles") == ["second-host"] for n in SECOND_HOST)
    assert not any("profiles" in services[n] for n in (*SERVICES, POSTGRES))
    volume_names = set(doc["volumes"])
    mounts = set()
    for name, svc in services.items():
        assert svc["restart"] in ("always", "unless-stopped", "on-failure")
        assert svc["healthcheck"]["test"][0] == "CMD"
        assert ("ports" in svc) == (name in EDGES), "only the edges publish a port"
        if name == POSTGRES:
            continue
        assert svc["entrypoint"] == ["acpgate"]
        for vol in svc["volumes"]:
            source, target = vol.split(":")[:2]
            assert source in volume_names
            mounts.add((source, target))
    assert len(mounts) == 1, "one shared volume for data and workspaces"
    pg = services[POSTGRES]
    assert pg["image"].startswith("postgres:")
    assert pg["healthcheck"]["test"][1] == "pg_isready"
    pg_volumes = {v.split(":")[0] for v in pg["volumes"]}
    assert pg_volumes <= volume_names and not pg_volumes & {m[0] for m in mounts}
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
    dockerfile = (REPO / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert users and not users[-1].startswith(("root", "0")), "the image runs as a non-root user"
    assert 'ENTRYPOINT ["acpgate"]' in dockerfile


class Mapper:
    """Container world → host world: volume path, service host names, ports."""

    def __init__(self, doc: dict[str, Any], data: Path, postgres_port: int = 0) -> None:
        self.volume_target = doc["services"]["edge"]["volumes"][0].split(":")[1]
        self.data = data
        self.ports: dict[str, int] = {}
        if postgres_port:  # postgres:5432 is the throwaway cluster
            self.ports["5432"] = postgres_port

    def port(self, container_port: str) -> str:
        if container_port not in self.ports:
            self.ports[container_port] = free_port()
        return str(self.ports[container_port])

    def __call__(self, value: str) -> str:
        value = value.replace(self.volume_target, str(self.data))
        names = sorted((*SERVICES, *SECOND_HOST, POSTGRES), key=len, reverse=True)
        hosts = "|".join(re.escape(h) for h in (*names, "0.0.0.0", "127.0.0.1", "localhost"))
        value = re.sub(rf"\b({hosts}):(\d+)\b",
                       lambda m: f"127.0.0.1:{self.port(m.group(2))}", value)
        return value

    def env(self, raw: dict[str, Any], compose_env: dict[str, str]) -> dict[str, str]:
        out = {k: v for k, v in os.environ.items() if not k.startswith("ACPGATE_")}
        for key, value in raw.items():
            text = interpolate(str(value), compose_env)
            if key.endswith("__port"):
                text = self.port(text)
            elif key.endswith("__host") and text == "0.0.0.0":
                text = "127.0.0.1"
            out[key] = self(text)
        return out

    def argv(self, argv: list[str]) -> list[str]:
        if argv[0] == "acpgate":
            return [sys.executable, "-m", "acpgate", *argv[1:]]
        if argv[0] == "python":
            return [sys.executable, *(self(a) for a in argv[1:])]
        return [self(a) for a in argv]


async def wait_healthcheck(argv: list[str], env: dict[str, str], proc: Any, tries: int = 300) -> None:
    for _ in range(tries):
        assert proc.returncode is None, f"{argv} target exited early"
        check = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        if await check.wait() == 0:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"healthcheck never passed: {argv}")


def order(services: dict[str, Any]) -> list[str]:
    done: list[str] = []
    while len(done) < len(services):
        for name, svc in services.items():
            if name not in done and all(d in done for d in svc.get("depends_on", {})):
                done.append(name)
    return done


async def start_postgres(svc: dict[str, Any], cluster: Cluster, compose_env: dict[str, str]
                         ) -> None:
    """The postgres service, as the throwaway cluster: its user is the cluster's, its
    database is created there, its healthcheck command answers for it."""
    env = {k: interpolate(str(v), compose_env) for k, v in svc["environment"].items()}
    assert env["POSTGRES_USER"] == SUPERUSER
    assert env["POSTGRES_PASSWORD"] == cluster.password
    await asyncio.to_thread(cluster.create_database, env["POSTGRES_DB"])
    check = [str(Path(cluster.bins["initdb"]).parent / svc["healthcheck"]["test"][1]),
             *svc["healthcheck"]["test"][2:], "-h", "127.0.0.1", "-p", str(cluster.port)]
    done = await asyncio.create_subprocess_exec(*check, stdout=asyncio.subprocess.DEVNULL)
    assert await done.wait() == 0, f"{check} failed"


async def test_compose_smoke_as_host_processes(tmp_path: Path, pg_cluster: Cluster) -> None:
    doc = load_compose()
    with pytest.raises(AssertionError, match="ACPGATE_GRPC_TOKEN"):
        Mapper(doc, tmp_path).env(doc["services"]["session"]["environment"], {})
    with pytest.raises(AssertionError, match="ACPGATE_PG_PASSWORD"):
        Mapper(doc, tmp_path).env(doc["services"]["session"]["environment"],
                                  {"ACPGATE_GRPC_TOKEN": GRPC_TOKEN})
    data = tmp_path / "volume"
    data.mkdir()
    mapper = Mapper(doc, data, postgres_port=pg_cluster.port)
    compose_env = {"ACPGATE_GRPC_TOKEN": GRPC_TOKEN, "ACPGATE_PG_PASSWORD": pg_cluster.password}
    procs: dict[str, asyncio.subprocess.Process] = {}
    envs: dict[str, dict[str, str]] = {}
    try:
        for name in order(doc["services"]):
            svc = doc["services"][name]
            if name == POSTGRES:
                await start_postgres(svc, pg_cluster, compose_env)
                continue
            env = mapper.env(svc["environment"], compose_env)
            envs[name] = env
            argv = mapper.argv([*svc["entrypoint"], *svc["command"]])
            log = (tmp_path / f"{name}.log").open("wb")
            procs[name] = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log)
            await wait_healthcheck(mapper.argv(svc["healthcheck"]["test"][1:]), env, procs[name])

        edge_env = envs["edge"]
        cfg = load_config(Path(edge_env["ACPGATE_CONFIG_DIR"]), environ=edge_env)
        cfg_b = load_config(Path(envs["edge-b"]["ACPGATE_CONFIG_DIR"]), environ=envs["edge-b"])
        assert cfg.data_dir.is_relative_to(data) and cfg_b.data_dir.is_relative_to(data)
        assert cfg.data_dir != cfg_b.data_dir, "the second host has its own data dir"
        assert token_db_path(cfg) == token_db_path(cfg_b), "and reads the same tokens"
        assert cfg.services.session_addr.startswith("127.0.0.1:")  # TCP, as in compose
        # `docker compose exec edge acpgate token create`: the same store the edge reads.
        _, secret = TokenStore(token_db_path(cfg)).create("compose")
        headers = {"Authorization": f"Bearer {secret}"}
        url = f"ws://127.0.0.1:{cfg.gateway.port}/acp"
        async with connect(url, proxy=None, additional_headers=headers) as ws:
            client = RawClient(ws, select("allow-once"))
            init = await client.result("initialize", {"protocolVersion": 1})
            assert init["_meta"]["zeroclaw"]["defaultModel"] == "demo/demo"
            assert init["agentCapabilities"]["loadSession"] is True  # PostgreSQL, persistent
            new = await client.result("session/new", {})
            assert Path(new["workspaceDir"]).is_relative_to(data.resolve())
            res = await client.result("session/prompt",
                                      {"sessionId": new["sessionId"], "prompt": "!echo compose"})
            assert res["stopReason"] == "end_turn" and "compose" in res["content"]
            assert [r["id"] for r in client.requests] == ["zc-out-0"]
            await client.result("session/close", {"sessionId": new["sessionId"]})
        # The second host loads it: the rows are in PostgreSQL, the token file is shared.
        url_b = f"ws://127.0.0.1:{cfg_b.gateway.port}/acp"
        async with connect(url_b, proxy=None, additional_headers=headers) as ws:
            client = RawClient(ws, select("allow-once"))
            seen, resp = await client.call("session/load", {"sessionId": new["sessionId"]})
            assert set(resp["result"]) == {"modes", "configOptions"}  # issue 17
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

        tree = [p.pid for proc in procs.values()
                for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]]
    finally:
        # `docker compose down`: SIGTERM each container, edges first.
        for name in reversed(list(procs)):
            proc = procs[name]
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 60)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    assert all(proc.returncode == 0 for proc in procs.values())
    for name in procs:
        text = (tmp_path / f"{name}.log").read_text()
        for secret_text in (GRPC_TOKEN, secret, pg_cluster.password):
            assert secret_text not in text, f"a secret leaked into {name}'s log"
    left = []
    for pid in tree:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.Error:
            pass
    assert left == []
