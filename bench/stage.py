"""The stage the benchmarks run on: a throw-away config, ``acpgate acp`` and ``acpgate serve``.

The config has the agent ``firehose`` (``kind = "acp"``, the script in this
package) as the default alias, the same adapter again as ``firehose_warm``
with a warm pool, and enough session slots for the concurrency run.
``acpgate acp`` and ``acpgate serve`` keep their data (leases, warm pools) in
separate dirs, so neither's startup reap touches the other's adapters.
Everything lives in a short temp dir (unix socket paths stay short) that is
removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.transports import Endpoint, adapter_argv, stdio_peer, ws_peer
from services.common.config import Config, PathsSection, load_config, with_overrides
from services.edge.tokens import TokenStore, token_db_path

REPO = Path(__file__).resolve().parents[1]
FIREHOSE = Path(__file__).resolve().parent / "firehose_agent.py"
ALIAS = "firehose"
#: The same adapter with a warm pool of :attr:`Stage.warm` adapters.
WARM_ALIAS = "firehose_warm"
ACPGATE = [sys.executable, "-m", "acpgate"]


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of acpgate children: repo importable, quiet logs, no stray overrides,
    then ``extra`` (e.g. ``ACPGATE_EVENT_LOOP`` of one benchmark variant)."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("ACPGATE_") and "__" in k)}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["ACPGATE_LOG_LEVEL"] = "warning"
    env.update(extra or {})
    return env


@dataclass
class Stage:
    """One benchmark config directory."""

    root: Path
    port: int
    max_sessions: int
    #: Adapters the warm alias keeps ready.
    warm: int = 1
    #: ``[store] url`` ("" = the SQLite file in the data dir).
    store_url: str = ""
    #: Logs of ``acpgate serve`` starts that failed (and were retried).
    failed_starts: list[str] = field(default_factory=list)
    #: Extra environment of ``acpgate acp`` and ``acpgate serve`` here.
    env: dict[str, str] = field(default_factory=dict)

    @property
    def config_dir(self) -> Path:
        """The ``--config-dir`` of every acpgate command here."""
        return self.root / "cfg"

    @property
    def workspace(self) -> Path:
        """The sessions' cwd: beside the config dir (a cwd containing it is refused)."""
        return self.root / "work"

    def write(self) -> Config:
        """Write config.toml and return the loaded config."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(exist_ok=True)
        argv = adapter_argv(FIREHOSE)
        store = f'\n[store]\nurl = {json.dumps(self.store_url)}\n' if self.store_url else ""
        (self.config_dir / "config.toml").write_text(store + f"""
[acp]
default_agent = "{ALIAS}"
max_sessions = {self.max_sessions}
# One bench client opens every session under one token.
max_sessions_per_token = {self.max_sessions}
session_timeout_secs = 3600

[gateway]
host = "127.0.0.1"
port = {self.port}
max_connections = {self.max_sessions + 8}
# One bench client holds every connection under one token.
max_connections_per_token = {self.max_sessions + 8}

[agents.{ALIAS}]
kind = "acp"
command = {json.dumps(argv[0])}
args = {json.dumps(argv[1:])}

[agents.{WARM_ALIAS}]
kind = "acp"
command = {json.dumps(argv[0])}
args = {json.dumps(argv[1:])}
warm = {self.warm}
""", encoding="utf-8")
        return self.config()

    def config(self) -> Config:
        """The effective config (no environment overrides)."""
        return load_config(self.config_dir, environ={})

    @property
    def ws_url(self) -> str:
        """The gateway's ``/acp`` URL."""
        return f"ws://127.0.0.1:{self.port}/acp"

    def mint_token(self) -> str:
        """A fresh gateway token (``acpgate token create`` does the same)."""
        return TokenStore(token_db_path(self.config())).create("bench")[1]

    @property
    def acp_data_dir(self) -> Path:
        """The data dir of ``acpgate acp`` (serve's is the config's default)."""
        return self.root / "acp-data"

    def data_dir(self, kind: str) -> Path:
        """The data dir of ``"acp"`` or ``"serve"``."""
        return self.acp_data_dir if kind == "acp" else self.config().data_dir

    def acp_config(self) -> Config:
        """The effective config of ``acpgate acp`` (its own data dir)."""
        return with_overrides(self.config(), paths=PathsSection(data_dir=str(self.acp_data_dir)))

    async def acp(self) -> Endpoint:
        """``acpgate acp`` (embedded services) as a stdio peer."""
        env = child_env(self.env)
        env["ACPGATE_paths__data_dir"] = str(self.acp_data_dir)
        return await stdio_peer([*ACPGATE, "acp", "--config-dir", str(self.config_dir)],
                                env=env, cwd=REPO)

    async def adapter(self) -> Endpoint:
        """The firehose adapter itself, read directly (the baseline)."""
        return await stdio_peer(adapter_argv(FIREHOSE), cwd=self.root)

    async def ws_firehose(self, within: float = 30.0, module: str = "bench.ws_firehose",
                          ) -> Endpoint:
        """The firehose served straight over WebSocket (no edge): the transport ceiling
        (``module``: ``bench.ws_firehose`` with websockets, ``bench.ws_firehose_picows``)."""
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, str(port), env=child_env(), cwd=str(REPO),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not await _port_open(port):
            if proc.returncode is not None or loop.time() > deadline:
                if proc.returncode is None:
                    proc.kill()
                await proc.wait()
                raise RuntimeError(f"{module} did not open port {port}")
            await asyncio.sleep(0.05)
        endpoint = await ws_peer(f"ws://127.0.0.1:{port}/", "unused")
        endpoint.proc = proc
        endpoint.terminate = True
        return endpoint

    async def ws(self, token: str) -> Endpoint:
        """A WebSocket connection to the running gateway."""
        return await ws_peer(self.ws_url, token)


@asynccontextmanager
async def stage(max_sessions: int = 64, store_url: str = "", warm: int = 1) -> AsyncIterator[Stage]:
    """A fresh stage in a short temp dir, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="acpb-", dir="/tmp"))
    st = Stage(root, free_port(), max_sessions, warm=warm, store_url=store_url)
    st.write()
    try:
        yield st
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Serve:
    """A running ``acpgate serve`` and its children."""

    proc: asyncio.subprocess.Process

    def children(self) -> dict[str, psutil.Process]:
        """``session`` / ``lifecycle`` / ``edge`` → the child process (with several edge
        workers: one of them; :meth:`all_children` has every one)."""
        return dict(self.all_children())

    def all_children(self) -> list[tuple[str, psutil.Process]]:
        """Every child as ``(kind, process)``: ``session``, ``lifecycle``, and ``edge`` once
        per edge worker (``[gateway] workers``)."""
        out: list[tuple[str, psutil.Process]] = []
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.proc.pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    cmd = child.cmdline()
                    for name, sub in (("session", "session-service"),
                                      ("lifecycle", "lifecycle-service"), ("edge", "edge")):
                        if sub in cmd:
                            out.append((name, child))
        return out


async def _port_open(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True


async def _healthy(port: int) -> bool:
    """``GET /healthz`` answers 200: the edge serves and both services are up.

    An open port is not enough: ``acpgate serve`` binds the gateway port itself
    before it starts the edge, so the port accepts before the edge runs.
    """
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status = await asyncio.wait_for(reader.readline(), 5)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return status.split(b" ")[1:2] == [b"200"]


class ServeStartFailed(RuntimeError):
    """``acpgate serve`` exited (or hung) before its gateway answered healthy."""


async def _start_serve(st: Stage, log_path: Path, within: float) -> asyncio.subprocess.Process:
    with log_path.open("wb") as log_file:  # the children inherit it; read on failure
        proc = await asyncio.create_subprocess_exec(
            *ACPGATE, "serve", "--config-dir", str(st.config_dir), env=child_env(st.env),
            cwd=str(REPO), stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await _healthy(st.port):
        if proc.returncode is not None or loop.time() > deadline:
            await _stop(proc)
            tail = (await asyncio.to_thread(log_path.read_text, errors="replace"))[-3000:]
            raise ServeStartFailed(f"acpgate serve was not healthy on port {st.port} "
                                   f"(exit code {proc.returncode}); its log:\n{tail}")
        await asyncio.sleep(0.1)
    return proc


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@asynccontextmanager
async def serve(st: Stage, within: float = 60.0, attempts: int = 3) -> AsyncIterator[Serve]:
    """``acpgate serve`` until the gateway answers healthy; SIGTERM and wait afterwards.

    A start that fails is logged in :attr:`Stage.failed_starts` and retried
    (up to ``attempts`` starts) so one flaky start does not void the whole run.
    """
    proc: asyncio.subprocess.Process | None = None
    for attempt in range(1, attempts + 1):
        try:
            proc = await _start_serve(st, st.root / f"serve-{attempt}.log", within)
            break
        except ServeStartFailed as exc:
            st.failed_starts.append(str(exc))
            if attempt == attempts:
                raise
    assert proc is not None
    try:
        yield Serve(proc)
    finally:
        await _stop(proc)
