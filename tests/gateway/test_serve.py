"""`acpgate serve` as a real process tree (SPEC §0, §11).

Health-gated start, a session through the WebSocket port, a crashed child
restarted with backoff, and SIGTERM/SIGINT shutdown in order with no process
left behind (psutil).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from .stack import RawClient, select
from .wsfixtures import free_port, mint, start_serve, wait_healthy, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def children_by_command(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for child in psutil.Process(pid).children():
        try:
            cmd = child.cmdline()
        except psutil.Error:  # exited meanwhile
            continue
        for name in ("session-service", "lifecycle-service", "edge"):
            if name in cmd:
                out[name] = child.pid
    return out


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (zombies and vanished ones excluded)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


async def eventually(check: Any, what: str, tries: int = 600) -> None:
    for _ in range(tries):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_serve_session_crash_restart_and_sigterm_leaves_nothing(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port)
    _, secret = mint(cfg)
    log = tmp_path / "serve.log"
    proc = await start_serve(cfg.config_dir, log)
    try:
        await wait_healthy(port, proc)
        kids = children_by_command(proc.pid)
        assert set(kids) == {"session-service", "lifecycle-service", "edge"}
        started = [e for e in events(log) if e.get("event") == "child_started"]
        assert [e["child"] for e in started] == ["session", "lifecycle", "edge"]
        assert "run" in os.listdir(cfg.data_dir)  # unix sockets under <data dir>/run

        ws = await connect(f"ws://127.0.0.1:{port}/acp", proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"})
        client = RawClient(ws, select("allow-once"))
        sid = (await client.result("session/new", {}))["sessionId"]
        res = await client.result("session/prompt", {"sessionId": sid, "prompt": "!echo served"})
        assert res["stopReason"] == "end_turn" and "served" in res["content"]
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(tree) >= 5  # three services + wrapper + adapter

        # A crashed child is restarted (with backoff) and the event is logged.
        os.kill(kids["session-service"], signal.SIGKILL)
        await eventually(
            lambda: children_by_command(proc.pid).get("session-service") not in (None, kids["session-service"]),
            "session service restarted")
        await wait_healthy(port, proc)
        exited = [e for e in events(log) if e.get("event") == "child_exited"]
        assert exited and exited[0]["child"] == "session" and exited[0]["exit_code"] == -9
        res = await client.result("session/prompt", {"sessionId": sid, "prompt": "still here"})
        assert res["stopReason"] == "end_turn"
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]

        proc.send_signal(signal.SIGTERM)
        # The edge goes first and closes the connection as "going away".
        with pytest.raises(ConnectionClosed) as info:
            while True:
                await asyncio.wait_for(ws.recv(), 60)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1001
        assert await asyncio.wait_for(proc.wait(), 90) == 0
        left = alive(tree)
        assert left == [], f"processes left after SIGTERM: {left}"
        stopped = [e["child"] for e in events(log) if e.get("event") == "child_stopped"]
        assert stopped == ["edge", "lifecycle", "session"]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_sigint_right_after_start(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port)
    log = tmp_path / "serve.log"
    proc = await start_serve(cfg.config_dir, log)
    try:
        await wait_healthy(port, proc)
        # session, lifecycle and edge; the built-in agent's warm adapter is the lifecycle's
        assert len(psutil.Process(proc.pid).children()) == 3
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert alive(tree) == []
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_fails_cleanly_when_a_service_cannot_start(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "cfg", port=port)
    # A directory where the session socket must be: the session service cannot bind.
    (cfg.data_dir / "run" / "session.sock").mkdir(parents=True)
    log = tmp_path / "serve.log"
    proc = await start_serve(cfg.config_dir, log)
    assert await asyncio.wait_for(proc.wait(), 90) == 1
    assert any(e.get("event") == "child_unhealthy" for e in events(log))


async def test_serve_without_a_service_key_says_why_before_starting_anything(
        tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg", port=free_port())
    # A file where the run/ directory must be: the install's service key cannot be made.
    cfg.data_dir.mkdir(parents=True)
    (cfg.data_dir / "run").write_text("not a directory")
    log = tmp_path / "serve.log"
    proc = await start_serve(cfg.config_dir, log)
    assert await asyncio.wait_for(proc.wait(), 90) == 2
    text = log.read_text()
    assert f"{cfg.data_dir / 'run' / 'service.key'}: Not a directory" in text, text
    assert not any(e.get("event") == "child_started" for e in events(log))


# ------------------------------------------------------------------ spawning children


async def test_children_spawn_while_grpc_is_busy() -> None:
    """serve starts children while its gRPC health-check threads run. A fork() there
    (a ``preexec_fn``) ran gRPC's fork handlers in the child, which died before exec
    about once in eight spawns (SIGSEGV/SIGABRT, "epoll_wait error: Bad file
    descriptor"): serve lost its lifecycle child at start. Forty spawns under a busy
    in-process gRPC server must all reach their exec; with the old fork path this
    failed with probability > 99 %."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from acpgate.serve_spawn import spawn_child

    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(
        health.aio.HealthServicer(), server)  # type: ignore[attr-defined]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)

    async def hammer() -> None:
        while True:
            await stub.Check(health_pb2.HealthCheckRequest())

    busy = asyncio.create_task(hammer())
    try:
        await asyncio.sleep(0.05)
        codes = []
        for _ in range(40):
            child = await spawn_child(sys.executable, ["/bin/true"], os.environ)
            codes.append(await child.wait())
        assert codes == [0] * 40
    finally:
        busy.cancel()
        with contextlib.suppress(BaseException):
            await busy
        await channel.close(None)
        await server.stop(None)


async def test_child_gets_sigterm_when_serve_dies() -> None:
    """The parent-death signal survives the move off ``preexec_fn``: SIGKILL the parent
    and its child (its own process group, armed by the exec trampoline) gets SIGTERM."""
    script = (
        "import asyncio, os, sys, time\n"
        "from acpgate.serve_spawn import spawn_child\n"
        "async def main():\n"
        "    p = await spawn_child(sys.executable, [sys.executable, '-c',"
        " 'import time; time.sleep(60)'], os.environ)\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child_pid = int(await asyncio.wait_for(parent.stdout.readline(), 30))
        child = psutil.Process(child_pid)
        assert child.ppid() == parent.pid
        assert os.getpgid(child_pid) == child_pid  # its own process group
        parent.kill()
        await parent.wait()
        await eventually(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
                         "child got its parent-death signal")
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
