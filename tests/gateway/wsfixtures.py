"""Helpers for gateway tests: configs, real gRPC health/lifecycle stand-ins, a running EdgeServer."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.addresses import LIFECYCLE_SERVICE, SESSION_SERVICE
from services.common.config import Config, load_config
from services.common.grpc_auth import grpc_security
from services.common.grpc_server import RunningServer, start_server
from services.edge.metrics import Metrics
from services.edge.tokens import TokenStore, token_db_path
from services.edge.transport.probe import ServiceProbe
from services.edge.transport.ws_server import EdgeServer
from tests.launches import config_environ

DEMO_CONFIG = """\
[acp]
default_agent = "assistant"

[gateway]
host = "127.0.0.1"
port = {port}
path_prefix = "{prefix}"
max_connections = {max_connections}
{gateway}
[agents.assistant]
kind = "builtin"
provider = "demo"
model = "demo"

[agents.helper]
kind = "builtin"
provider = "demo"
model = "demo"
"""


def write_config(config_dir: Path, *, port: int = 42617, prefix: str = "",
                 max_connections: int = 64, extra: str = "",
                 detach_grace_secs: int | None = None) -> Config:
    """Write a demo config.toml (two built-in demo agents) and load it (``detach_grace_secs``:
    that ``[gateway]`` key, else its default)."""
    gateway = "" if detach_grace_secs is None else f"detach_grace_secs = {detach_grace_secs}\n"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.toml").write_text(
        DEMO_CONFIG.format(port=port, prefix=prefix, max_connections=max_connections,
                           gateway=gateway) + extra,
        encoding="utf-8",
    )
    return load_config(config_dir, environ=config_environ())


class FakeLeases(lifecycle_pb2_grpc.LifecycleServiceServicer):
    """ListLeases over a fixed list (a stand-in for the lifecycle service in unit tests)."""

    def __init__(self, states: list[Any]) -> None:
        self.states = states

    async def ListLeases(self, request: Any, context: Any) -> lifecycle_pb2.ListLeasesResponse:
        return lifecycle_pb2.ListLeasesResponse(
            leases=[lifecycle_pb2.Lease(lease_id=str(i), state=s) for i, s in enumerate(self.states)]
        )


@asynccontextmanager
async def stand_in_services(tmp: Path, lease_states: list[Any]) -> AsyncIterator[tuple[str, str]]:
    """Two real gRPC servers (health + a ListLeases stand-in) on unix sockets."""
    session: RunningServer = await start_server(
        f"unix:{tmp}/s.sock", lambda s: None, [SESSION_SERVICE])
    lifecycle: RunningServer = await start_server(
        f"unix:{tmp}/l.sock",
        lambda s: lifecycle_pb2_grpc.add_LifecycleServiceServicer_to_server(
            FakeLeases(lease_states), s),  # type: ignore[abstract]
        [LIFECYCLE_SERVICE])
    try:
        yield session.address, lifecycle.address
    finally:
        await session.stop(0)
        await lifecycle.stop(0)


class FakeRuntime:
    """Only what the gateway reads of an EdgeRuntime: the metrics."""

    def __init__(self) -> None:
        self.metrics = Metrics()


ServeFn = Callable[..., Awaitable[None]]


async def frames_until(incoming: AsyncIterator[str],
                       stopping: asyncio.Event | None) -> AsyncIterator[str]:
    """``incoming`` until it ends or ``stopping`` is set: what a test dialect does when
    the gateway stops (``EdgeServer.stop`` waits for each connection to wind down)."""
    it = incoming.__aiter__()
    stop = asyncio.ensure_future(stopping.wait()) if stopping is not None else None
    try:
        while True:
            nxt = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({nxt} | ({stop} if stop else set()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                return
            try:
                yield nxt.result()
            except StopAsyncIteration:
                return
    finally:
        if stop is not None:
            stop.cancel()


@asynccontextmanager
async def running_edge(cfg: Config, runtime: Any, addresses: tuple[str, str],
                       serve_connection: ServeFn | None = None, **kw: Any) -> AsyncIterator[EdgeServer]:
    """An EdgeServer on a free port, stopped afterwards."""
    cfg = replace(cfg, gateway=replace(cfg.gateway, port=0)) if cfg.gateway.port == 42617 else cfg
    probe = ServiceProbe(grpc_security(cfg, {}), *addresses)
    server = EdgeServer(cfg, runtime, probe=probe, serve_connection=serve_connection, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await probe.close()


def mint(cfg: Config, name: str = "test") -> tuple[str, str]:
    """A fresh (token_id, secret) in the config's token store."""
    return TokenStore(token_db_path(cfg)).create(name)


def _http_get(url: str) -> tuple[int, str, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


async def http_get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a plain GET, off the event loop."""
    import asyncio

    return await asyncio.to_thread(_http_get, url)


def free_port() -> int:
    """A TCP port the OS just had free on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(port: int, proc: asyncio.subprocess.Process, tries: int = 600) -> None:
    """Wait until the gateway on ``port`` answers /healthz with 200 (``proc`` must keep running)."""
    for _ in range(tries):
        assert proc.returncode is None, "serve exited early"
        try:
            status, _, _ = await http_get(f"http://127.0.0.1:{port}/healthz")
            if status == 200:
                return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("serve never became healthy")


async def start_serve(config_dir: Path, log: Path,
                      extra_env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """``acpgate serve`` as a subprocess (``extra_env`` over this environment), its stderr
    (JSON logs) in ``log``."""
    env = {**os.environ, "ACPGATE_LOG_LEVEL": "info", **(extra_env or {})}
    with log.open("wb") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "acpgate", "serve", "--config-dir", str(config_dir),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err,
            env=env)


@asynccontextmanager
async def served_for_bridge(config_dir: Path) -> AsyncIterator[str]:
    """``acpgate serve`` (demo agents) on a free port with a minted token; yields the token.

    ``acpgate bridge --config-dir <config_dir>`` with the token in
    ``ACPGATE_ACP_BRIDGE_TOKEN`` reaches the gateway.
    """
    port = free_port()
    cfg = write_config(config_dir, port=port)
    _, secret = mint(cfg)
    proc = await start_serve(config_dir, config_dir / "serve.log")
    try:
        await wait_healthy(port, proc)
        yield secret
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
