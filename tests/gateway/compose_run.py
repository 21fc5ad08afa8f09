"""Running docker-compose.yml's topology as host processes (no Docker engine here).

Each acpgate service's ``entrypoint`` + ``command`` runs with its compose
environment, container paths mapped to temp dirs (the state volume, the
projects dir at ``/workspace``), service host names and ports mapped to free
local ports; each service's own healthcheck command is waited on in
``depends_on`` order, and the whole topology is stopped as ``docker compose
down`` would (SIGTERM, edges first). The ``postgres`` service is the tests'
throwaway cluster. :func:`merged` applies an override file
(``docker compose -f a.yml -f b.yml``) the way compose merges the keys acpgate's
files use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psutil
import yaml

from tests.pg_cluster import SUPERUSER, Cluster

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
AGENTS_OVERRIDE = REPO / "docker-compose.agents.yml"
#: The acpgate services of the default deployment, and of the second-host profile.
SERVICES = ("session", "lifecycle", "edge")
SECOND_HOST = ("lifecycle-b", "edge-b")
POSTGRES = "postgres"
EDGES = ("edge", "edge-b")
#: Where sessions work inside the containers (ACPGATE_PROJECTS_DIR is mounted there).
PROJECTS_TARGET = "/workspace"


def volume_parts(volume: str) -> tuple[str, str]:
    """``source:target[:mode]`` → (source, target); a source may hold ``${V:-default}``."""
    match = re.fullmatch(r"(.+):(/[^:]*)(?::(?:ro|rw))?", volume)
    assert match is not None, f"not a volume: {volume}"
    return match.group(1), match.group(2)


def load(path: Path = COMPOSE) -> dict[str, Any]:
    """A compose file as YAML."""
    return dict(yaml.safe_load(path.read_text()))


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``docker compose -f base -f override``: mappings merge key by key (``environment``,
    ``build``), sequences of volumes merge by target, anything else is replaced."""
    out = {**base, "services": {name: dict(svc) for name, svc in base["services"].items()}}
    for name, svc in override.get("services", {}).items():
        target = out["services"].setdefault(name, {})
        for key, value in svc.items():
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                target[key] = {**target[key], **value}
            elif key == "volumes" and isinstance(target.get(key), list):
                by_target = {volume_parts(v)[1]: v for v in [*target[key], *value]}
                target[key] = list(by_target.values())
            else:
                target[key] = value
    return out


def interpolate(value: str, env: Mapping[str, str]) -> str:
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
    """A TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Mapper:
    """Container world → host world: volume paths, service host names, ports."""

    def __init__(self, doc: dict[str, Any], data: Path, projects: Path,
                 postgres_port: int = 0) -> None:
        self.volume_target = state_target(doc)
        self.data = data
        self.projects = projects
        self.ports: dict[str, int] = {}
        if postgres_port:  # postgres:5432 is the throwaway cluster
            self.ports["5432"] = postgres_port

    def port(self, container_port: str) -> str:
        """The host port standing in for ``container_port``."""
        if container_port not in self.ports:
            self.ports[container_port] = free_port()
        return str(self.ports[container_port])

    def __call__(self, value: str) -> str:
        value = value.replace(self.volume_target, str(self.data))
        value = value.replace(PROJECTS_TARGET, str(self.projects))
        names = sorted((*SERVICES, *SECOND_HOST, POSTGRES), key=len, reverse=True)
        hosts = "|".join(re.escape(h) for h in (*names, "0.0.0.0", "127.0.0.1", "localhost"))
        return re.sub(rf"\b({hosts}):(\d+)\b",
                      lambda m: f"127.0.0.1:{self.port(m.group(2))}", value)

    def env(self, raw: Mapping[str, Any], compose_env: Mapping[str, str]) -> dict[str, str]:
        """A service's environment on this host (ours, minus ACPGATE_*, plus the compose one)."""
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
        """A container command line as a host one."""
        if argv[0] == "acpgate":
            return [sys.executable, "-m", "acpgate", *argv[1:]]
        if argv[0] == "python":
            return [sys.executable, *(self(a) for a in argv[1:])]
        return [self(a) for a in argv]


def state_target(doc: Mapping[str, Any]) -> str:
    """Where the state volume is mounted in the edge container."""
    targets = [volume_parts(v)[1] for v in doc["services"]["edge"]["volumes"]]
    return next(t for t in targets if t != PROJECTS_TARGET)


def order(services: Mapping[str, Any]) -> list[str]:
    """Service names in ``depends_on`` order."""
    done: list[str] = []
    while len(done) < len(services):
        for name, svc in services.items():
            if name not in done and all(d in done for d in svc.get("depends_on", {})):
                done.append(name)
    return done


async def wait_healthcheck(argv: list[str], env: dict[str, str], proc: Any,
                           tries: int = 300) -> None:
    """Run a service's healthcheck command until it passes (the service must keep running)."""
    for _ in range(tries):
        assert proc.returncode is None, f"{argv} target exited early"
        check = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        if await check.wait() == 0:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"healthcheck never passed: {argv}")


async def start_postgres(svc: dict[str, Any], cluster: Cluster,
                         compose_env: Mapping[str, str]) -> None:
    """The postgres service, as the throwaway cluster: its user is the cluster's, its
    database is created there afresh (another test may have used the same name), its healthcheck command answers for it."""
    env = {k: interpolate(str(v), compose_env) for k, v in svc["environment"].items()}
    assert env["POSTGRES_USER"] == SUPERUSER
    assert env["POSTGRES_PASSWORD"] == cluster.password
    await asyncio.to_thread(cluster.recreate_database, env["POSTGRES_DB"])
    check = [str(Path(cluster.bins["initdb"]).parent / svc["healthcheck"]["test"][1]),
             *svc["healthcheck"]["test"][2:], "-h", "127.0.0.1", "-p", str(cluster.port)]
    done = await asyncio.create_subprocess_exec(*check, stdout=asyncio.subprocess.DEVNULL)
    assert await done.wait() == 0, f"{check} failed"


@dataclass
class Topology:
    """The running services: each one's process, host environment and log."""

    root: Path
    mapper: Mapper
    procs: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def tree(self) -> list[int]:
        """Every process of the topology right now (services and what they started)."""
        pids = []
        for proc in self.procs.values():
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(proc.pid)
                pids += [parent.pid, *(p.pid for p in parent.children(recursive=True))]
        return pids


@contextlib.asynccontextmanager
async def running(doc: dict[str, Any], root: Path, cluster: Cluster,
                  compose_env: Mapping[str, str],
                  extra_env: Mapping[str, Mapping[str, str]] | None = None,
                  ) -> AsyncIterator[Topology]:
    """Every service of ``doc`` started in order and healthy; stopped on exit (SIGTERM, in
    reverse order), then no process of it may be left. ``extra_env`` adds variables to a
    service's environment (what a test stands in for: a PATH holding the adapters)."""
    data, projects = root / "volume", root / "projects"
    data.mkdir()
    projects.mkdir()
    top = Topology(root, Mapper(doc, data, projects, postgres_port=cluster.port))
    files: list[TextIO] = []
    tree: list[int] = []
    try:
        for name in order(doc["services"]):
            svc = doc["services"][name]
            if name == POSTGRES:
                await start_postgres(svc, cluster, compose_env)
                continue
            env = top.mapper.env(svc["environment"], compose_env)
            env.update((extra_env or {}).get(name, {}))
            top.envs[name] = env
            argv = top.mapper.argv([*svc["entrypoint"], *svc["command"]])
            top.logs[name] = root / f"{name}.log"
            log = top.logs[name].open("w")
            files.append(log)
            top.procs[name] = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=root, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log)
            await wait_healthcheck(top.mapper.argv(svc["healthcheck"]["test"][1:]), env,
                                   top.procs[name])
        yield top
        tree = top.tree()
    finally:
        # `docker compose down`: SIGTERM each container, edges first.
        for name in reversed(list(top.procs)):
            proc = top.procs[name]
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 60)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        for log in files:
            log.close()
    assert all(proc.returncode == 0 for proc in top.procs.values()), \
        {name: proc.returncode for name, proc in top.procs.items()}
    left = []
    for pid in tree:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
    assert left == [], "compose down left processes behind"
