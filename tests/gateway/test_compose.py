"""docker-compose.yml smoke test without a Docker engine.

Reads the compose file, checks the deployment rules (one container per
service, shared volume, healthchecks, restart policy, non-root image, ports
only for the edge), then starts each service's entrypoint + command with its
environment as host processes — container paths mapped to a temp dir, service
host names and ports mapped to free local ports — waits on each service's own
healthcheck command in `depends_on` order, and drives a session through the
edge. The services talk TCP with the shared-token interceptor, as in compose.
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

from .stack import RawClient, select

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
SERVICES = ("session", "lifecycle", "edge")
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
    assert set(services) == set(SERVICES)
    volume_names = set(doc["volumes"])
    mounts = set()
    for name, svc in services.items():
        assert svc["restart"] in ("always", "unless-stopped", "on-failure")
        assert svc["healthcheck"]["test"][0] == "CMD"
        assert svc["entrypoint"] == ["acpgate"]
        for vol in svc["volumes"]:
            source, target = vol.split(":")[:2]
            assert source in volume_names
            mounts.add((source, target))
        assert ("ports" in svc) == (name == "edge"), "only the edge publishes a port"
    assert len(mounts) == 1, "one shared volume for data and workspaces"
    assert services["edge"]["depends_on"] == {
        "session": {"condition": "service_healthy"},
        "lifecycle": {"condition": "service_healthy"},
    }
    dockerfile = (REPO / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert users and not users[-1].startswith(("root", "0")), "the image runs as a non-root user"
    assert 'ENTRYPOINT ["acpgate"]' in dockerfile


class Mapper:
    """Container world → host world: volume path, service host names, ports."""

    def __init__(self, doc: dict[str, Any], data: Path) -> None:
        self.volume_target = doc["services"]["edge"]["volumes"][0].split(":")[1]
        self.data = data
        self.ports: dict[str, int] = {}

    def port(self, container_port: str) -> str:
        if container_port not in self.ports:
            self.ports[container_port] = free_port()
        return str(self.ports[container_port])

    def __call__(self, value: str) -> str:
        value = value.replace(self.volume_target, str(self.data))
        hosts = "|".join(re.escape(h) for h in (*SERVICES, "0.0.0.0", "127.0.0.1", "localhost"))
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


async def test_compose_smoke_as_host_processes(tmp_path: Path) -> None:
    doc = load_compose()
    with pytest.raises(AssertionError, match="ACPGATE_GRPC_TOKEN"):
        Mapper(doc, tmp_path).env(doc["services"]["session"]["environment"], {})
    data = tmp_path / "volume"
    data.mkdir()
    mapper = Mapper(doc, data)
    compose_env = {"ACPGATE_GRPC_TOKEN": GRPC_TOKEN}
    procs: dict[str, asyncio.subprocess.Process] = {}
    envs: dict[str, dict[str, str]] = {}
    try:
        for name in order(doc["services"]):
            svc = doc["services"][name]
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
        assert cfg.data_dir.is_relative_to(data)
        assert cfg.services.session_addr.startswith("127.0.0.1:")  # TCP, as in compose
        # `docker compose exec edge acpgate token create`: the same store the edge reads.
        _, secret = TokenStore(token_db_path(cfg)).create("compose")
        url = f"ws://127.0.0.1:{cfg.gateway.port}/acp"
        async with connect(url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            client = RawClient(ws, select("allow-once"))
            init = await client.result("initialize", {"protocolVersion": 1})
            assert init["_meta"]["zeroclaw"]["defaultModel"] == "demo/demo"
            new = await client.result("session/new", {})
            assert Path(new["workspaceDir"]).is_relative_to(data.resolve())
            res = await client.result("session/prompt",
                                      {"sessionId": new["sessionId"], "prompt": "!echo compose"})
            assert res["stopReason"] == "end_turn" and "compose" in res["content"]
            assert [r["id"] for r in client.requests] == ["zc-out-0"]

        # The shared token guards the gRPC services over TCP.
        for token, ok in ((None, False), (GRPC_TOKEN, True)):
            async with grpc.aio.insecure_channel(cfg.services.session_addr) as channel:
                stub = session_pb2_grpc.SessionServiceStub(channel)
                md = (("authorization", f"Bearer {token}"),) if token else None
                try:
                    await stub.GetStoreStatus(session_pb2.GetStoreStatusRequest(), metadata=md,
                                              timeout=10)
                    assert ok
                except grpc.aio.AioRpcError as exc:
                    assert not ok and exc.code() == grpc.StatusCode.UNAUTHENTICATED

        tree = [p.pid for proc in procs.values()
                for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]]
    finally:
        # `docker compose down`: SIGTERM each container, edge first.
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
        assert GRPC_TOKEN not in text and secret not in text, f"a token leaked into {name}'s log"
    left = []
    for pid in tree:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.Error:
            pass
    assert left == []
