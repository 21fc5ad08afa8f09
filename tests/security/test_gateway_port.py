"""``acpgate serve`` and ``acpgate edge`` with the gateway port taken.

Another process listens on the port: ``serve`` never logs ``serve_ready`` and then
restarts its edge forever on ``edge_bind_failed``. It binds the port before
anything else, and exits non-zero at once with ``port N on 127.0.0.1 is in use (by
pid P)``, no child started; ``acpgate edge`` alone does the same. And a running
serve keeps its port across a crash of its edge: the restarted edge serves the
sockets serve bound, so no other process can take the port in between.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from tests.gateway.wsfixtures import free_port, start_serve, wait_healthy, write_config
from tests.lifecycle.conftest import ProcessGuard
from tests.security.procs import eventually, guard

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: Listens on 127.0.0.1:<argv[1]> and says so; an unrelated program holding the port.
LISTENER = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
    "s.listen()\n"
    "print('listening', flush=True)\n"
    "time.sleep(600)\n"
)


async def hold_port(port: int, guard: ProcessGuard) -> asyncio.subprocess.Process:
    """A process of the test's listening on ``port``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LISTENER, str(port), stdout=asyncio.subprocess.PIPE)
    guard.track(proc.pid)
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"listening\n"
    return proc


def logged(path: Path) -> list[dict[str, object]]:
    """The JSON log lines of a process's stderr."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def edge_pids(serve_pid: int) -> set[int]:
    """The PIDs of serve's ``acpgate edge`` children (one that exits meanwhile is left out)."""
    out = set()
    for child in psutil.Process(serve_pid).children():
        try:
            if "edge" in child.cmdline():
                out.add(child.pid)
        except psutil.Error:
            continue
    return out


async def test_serve_and_edge_refuse_a_port_in_use(tmp_path: Path, guard: ProcessGuard) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port)
    holder = await hold_port(port, guard)
    try:
        log = tmp_path / "serve.log"
        serve = await start_serve(cfg.config_dir, log)
        guard.track(serve.pid)
        assert await asyncio.wait_for(serve.wait(), 60) == 2
        text = log.read_text()
        assert f"port {port} on 127.0.0.1 is in use (by pid {holder.pid})" in text, text
        events = {e.get("event") for e in logged(log)}
        assert "serve_ready" not in events and "child_started" not in events, events

        edge_log = tmp_path / "edge.log"
        with edge_log.open("wb") as err:
            edge = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "acpgate", "edge", "--config-dir", str(cfg.config_dir),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err,
                env={**os.environ, "ACPGATE_LOG_LEVEL": "info"})
        guard.track(edge.pid)
        assert await asyncio.wait_for(edge.wait(), 60) == 2
        text = edge_log.read_text()
        assert f"port {port} on 127.0.0.1 is in use (by pid {holder.pid})" in text, text
        assert holder.returncode is None  # nobody touched the holder
    finally:
        holder.kill()
        await holder.wait()


async def test_serve_keeps_its_port_across_an_edge_crash(tmp_path: Path, guard: ProcessGuard) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port)
    log = tmp_path / "serve.log"
    serve = await start_serve(cfg.config_dir, log)
    guard.track(serve.pid)
    try:
        await wait_healthy(port, serve)
        ready = [e for e in logged(log) if e.get("event") == "serve_ready"]
        assert len(ready) == 1
        (edge_pid,) = edge_pids(serve.pid)
        edge = psutil.Process(edge_pid)
        # The port is serve's own: the edge serves sockets it inherited.
        assert "--listen-fd" in edge.cmdline()
        edge.send_signal(signal.SIGKILL)
        # While no edge runs, the port stays taken: another process cannot bind it.
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LISTENER, str(port), stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE)
        guard.track(holder.pid)
        _, err = await asyncio.wait_for(holder.communicate(), 30)
        assert holder.returncode != 0 and b"Address already in use" in err
        await eventually(lambda: edge_pids(serve.pid) - {edge.pid} != set(), 30.0,
                         "the edge restarted")
        await wait_healthy(port, serve)
        assert not [e for e in logged(log) if e.get("event") == "edge_port_in_use"]
    finally:
        serve.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.wait(), 90) == 0
