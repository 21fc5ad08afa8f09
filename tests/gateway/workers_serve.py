"""``acpgate serve`` with several edge workers on one port, for the tests of edge workers.

Which worker accepts a connection is the kernel's choice; :func:`on_worker` makes it
the test's: every other worker is stopped (SIGSTOP) while the connection is made, so
the one accepting on the shared listening socket is the one left running (a stopped
worker's connections wait in the socket's queue for whoever accepts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from services.common.config import Config

from .stack import RawClient, select
from .wsfixtures import free_port, http_get, mint, start_serve, wait_healthy, write_config


@dataclass
class Served:
    """A running ``acpgate serve`` with edge workers."""

    proc: asyncio.subprocess.Process
    port: int
    cfg: Config
    token_id: str
    secret: str
    log: Path

    def workers(self) -> dict[int, psutil.Process]:
        """Edge worker number → its process."""
        out: dict[int, psutil.Process] = {}
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:  # serve is gone (replaced by a hot restart)
            return out
        for child in children:
            with contextlib.suppress(psutil.Error):
                cmd = child.cmdline()
                if "edge" in cmd and "--worker" in cmd:
                    out[int(cmd[cmd.index("--worker") + 1])] = child
        return out

    async def health(self) -> dict[str, Any]:
        """``/healthz``'s body."""
        _, _, body = await http_get(f"http://127.0.0.1:{self.port}/healthz")
        return dict(json.loads(body))

    async def health_status(self) -> tuple[int, dict[str, Any]]:
        """``/healthz``'s status code and body."""
        status, _, body = await http_get(f"http://127.0.0.1:{self.port}/healthz")
        return status, dict(json.loads(body))

    async def worker_connections(self) -> dict[int, int]:
        """``acpgate_worker_connections`` of ``/metrics``: worker → its open connections."""
        _, _, body = await http_get(f"http://127.0.0.1:{self.port}/metrics")
        prefix = 'acpgate_worker_connections{worker="'
        return {int(line[len(prefix):].split('"')[0]): int(float(line.split()[1]))
                for line in body.splitlines() if line.startswith(prefix)}

    async def metric(self, name: str) -> float:
        """One unlabelled sample of ``/metrics``."""
        _, _, body = await http_get(f"http://127.0.0.1:{self.port}/metrics")
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    async def all_reporting(self, count: int) -> None:
        """Wait until every worker's ``/healthz`` counts ``count`` workers reporting (each
        look with the others stopped; between looks all run, and report)."""
        for number in self.workers():
            async def sees_all() -> bool:
                with on_worker(self, number):  # noqa: B023 (called within the loop turn)
                    return (await self.health()).get("workers") == count
            await until(sees_all, f"worker {number} seeing {count} workers")

    def events(self) -> list[dict[str, Any]]:
        """serve's log lines (its children's included)."""
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out


@contextlib.asynccontextmanager
async def serve_workers(tmp: Path, *, workers: int = 2, gateway: str = "", extra: str = "",
                        env: dict[str, str] | None = None, detach_grace_secs: int = 0,
                        settle: bool = True, acp: str = "") -> AsyncIterator[Served]:
    """``acpgate serve`` with ``workers`` edge workers (sessions released at the disconnect
    unless ``detach_grace_secs``;
    ``gateway``: more ``[gateway]`` lines, ``acp``: more ``[acp]`` lines, ``extra``: more
    tables), a token minted; yielded the moment ``/healthz`` answers 200, and — ``settle``
    — every worker reporting."""
    port = free_port()
    cfg = write_config(tmp / "cfg", port=port, detach_grace_secs=detach_grace_secs,
                       extra=extra)
    text = (cfg.config_dir / "config.toml").read_text()
    (cfg.config_dir / "config.toml").write_text(
        text.replace("[gateway]\n", f"[gateway]\nworkers = {workers}\n{gateway}", 1)
        .replace("[acp]\n", f"[acp]\n{acp}", 1))
    token_id, secret = mint(cfg)
    log = tmp / "serve.log"
    proc = await start_serve(cfg.config_dir, log, extra_env=env)
    served = Served(proc, port, cfg, token_id, secret, log)
    try:
        await wait_healthy(port, proc)
        if settle:
            await served.all_reporting(workers)
        yield served
    finally:
        for worker in served.workers().values():
            with contextlib.suppress(psutil.Error):
                worker.resume()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@contextlib.contextmanager
def on_worker(served: Served, number: int) -> Iterator[None]:
    """Only worker ``number`` accepts connections meanwhile (the others are stopped)."""
    others = [p for n, p in served.workers().items() if n != number]
    for proc in others:
        proc.suspend()
    try:
        yield
    finally:
        for proc in others:
            with contextlib.suppress(psutil.Error):
                proc.resume()


async def dial(served: Served, secret: str | None = None, query: str = "") -> ClientConnection:
    """A WebSocket to ``/acp`` (``?query``) with the token."""
    url = f"ws://127.0.0.1:{served.port}/acp" + (f"?{query}" if query else "")
    return await connect(url, proxy=None, open_timeout=30,
                         additional_headers={"Authorization":
                                             f"Bearer {secret or served.secret}"})


async def until(check: Any, what: str, tries: int = 600) -> None:
    """Poll the async ``check`` until it holds (at most ``tries`` looks)."""
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def client_on(served: Served, number: int) -> RawClient | None:
    """An initialized client whose connection worker ``number`` serves; None when the
    connection was refused (503, or closed right after the upgrade: 1013)."""
    with on_worker(served, number):
        try:
            ws = await dial(served)
        except InvalidStatus as exc:
            assert exc.response.status_code == 503
            return None
        client = RawClient(ws, select("allow-once"))
        try:
            await client.result("initialize", {"protocolVersion": 1})
        except ConnectionClosed as exc:
            assert exc.rcvd is not None and exc.rcvd.code == 1013, exc
            return None
    return client


def worker_pid(served: Served, number: int) -> int:
    """The PID of worker ``number`` now."""
    return int(served.workers()[number].pid)


def kill_worker(served: Served, number: int) -> int:
    """SIGKILL worker ``number``; its PID."""
    pid = worker_pid(served, number)
    os.kill(pid, signal.SIGKILL)
    return pid
