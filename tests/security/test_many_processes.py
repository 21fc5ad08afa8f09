"""Any number of acpgate processes on one config dir.

Two editor windows each start ``acpgate acp`` on the same config dir and ``acpgate
serve`` runs beside them. Each runs a long shell command on the demo model (the
prompt ``!sleep 6; echo done``, autonomy ``full``: no approval asked) while the
others start; every command ends with exit code 0 — no process's startup reap
ends another's work (which would show as exit code -15). Then one ``acp`` is SIGKILLed
together with its wrapper, a detached command of its agent still running (its
orphan: it carries its lease in its environment), the others keep running
commands, and the next ``acp`` takes the dead one's instance slot and reaps
exactly its orphans — none of the live processes' agents or commands is touched. A second ``serve`` on the same
dir and port is refused at once, naming the first's PID, and the first's sockets
still answer. At the end, nothing of any of them is left.

Processes are found through what acpgate recorded (the lease store, the lease
markers in ``/proc/<pid>/environ``), never by guessing a PID.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.asyncio.client import connect

from services.common.config import load_config
from services.common.grpc_channel import wait_healthy as grpc_healthy
from tests.e2e.harness import AcpProcess
from tests.gateway.stack import RawClient
from tests.gateway.wsfixtures import free_port, mint, start_serve, wait_healthy
from tests.launches import config_environ, dial
from tests.lifecycle.conftest import ProcessGuard, start_service_process
from tests.security.procs import (
    LEASES_DB,
    alive,
    eventually,
    guard,
    lease_of,
    marked_with,
    read_leases,
)

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INIT = {"protocolVersion": 1, "clientCapabilities": {}}
#: The attacker's command: long enough for the other processes to start meanwhile.
LONG = "!sleep 6; echo done"
#: A command whose processes outlive a SIGKILLed acpgate: a detached sleeper and a long sleep.
ORPHANS = "!setsid sleep 4001 >/dev/null 2>&1 </dev/null & sleep 120"
#: The same, deaf to SIGTERM: only the SIGKILL after the lifecycle grace ends them.
STUBBORN_ORPHANS = "!trap '' TERM; setsid sleep 4001 >/dev/null 2>&1 </dev/null & sleep 120"
CONFIG = """\
[acp]
default_agent = "demo"

[gateway]
host = "127.0.0.1"
port = {port}

[autonomy]
level = "full"

[agents.demo]
kind = "builtin"
provider = "demo"
model = "demo"
"""


def session_key(sid: str) -> str:
    """The lease session key of a demo session."""
    return f"agent:demo:acp:{sid}"


def sleeps_of(lease_id: str) -> list[psutil.Process]:
    """The ``sleep`` processes a lease's agent runs (its shell's, by the lease markers)."""
    out = []
    for proc in marked_with(lease_id):
        try:
            if proc.name() == "sleep":
                out.append(proc)
        except psutil.Error:
            continue
    return out


def done_with_exit_0(result: dict[str, Any]) -> bool:
    """A demo turn whose shell command printed ``done`` and exited 0."""
    return result.get("stopReason") == "end_turn" and "exit code 0\ndone" in result["content"]


class Window:
    """One editor window: ``acpgate acp`` on the shared config dir, one session."""

    def __init__(self, config_dir: Path, guard: ProcessGuard) -> None:
        self.acp = AcpProcess(config_dir)
        guard.track(self.acp.proc.pid)
        self.config_dir = config_dir
        self.sid = ""

    async def open(self) -> Window:
        """initialize and session/new."""
        await asyncio.to_thread(self.acp.result, "initialize", INIT)
        self.sid = await asyncio.to_thread(self.acp.new_session)
        return self

    @property
    def lease_id(self) -> str:
        """The lease of its session."""
        return lease_of(self.config_dir / LEASES_DB, session_key(self.sid)).lease_id

    def prompt(self, text: str) -> asyncio.Task[Any]:
        """session/prompt in the background; the task's result is the prompt's result."""
        return asyncio.create_task(asyncio.to_thread(
            self.acp.result, "session/prompt", {"sessionId": self.sid, "prompt": text}))


class Gateway:
    """``acpgate serve`` on the shared config dir and one WebSocket session on it."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int, secret: str) -> None:
        self.proc, self.port, self.secret = proc, port, secret
        self.client: RawClient | None = None
        self.sid = ""

    async def open(self) -> Gateway:
        """Connect and session/new."""
        ws = await connect(f"ws://127.0.0.1:{self.port}/acp", proxy=None,
                           additional_headers={"Authorization": f"Bearer {self.secret}"})
        self.client = RawClient(ws)
        self.sid = (await self.client.result("session/new", {}))["sessionId"]
        return self

    def prompt(self, text: str) -> asyncio.Task[Any]:
        """session/prompt in the background."""
        assert self.client is not None
        return asyncio.create_task(self.client.result(
            "session/prompt", {"sessionId": self.sid, "prompt": text}))


async def running(lease_id: str) -> None:
    """Wait until the agent of ``lease_id`` runs its shell command's ``sleep``."""
    await eventually(lambda: bool(sleeps_of(lease_id)), 60.0, f"the command of {lease_id}")


async def test_two_acp_and_a_serve_on_one_config_dir(tmp_path: Path, guard: ProcessGuard) -> None:
    config_dir = tmp_path / "home" / ".acpgate"
    config_dir.mkdir(parents=True)
    port = free_port()
    (config_dir / "config.toml").write_text(CONFIG.format(port=port), encoding="utf-8")
    cfg = load_config(config_dir, environ=config_environ())
    _, secret = mint(cfg)
    leases_db = config_dir / LEASES_DB
    serve: asyncio.subprocess.Process | None = None
    windows: list[Window] = []
    try:
        # 1. Window A runs a long command; window B and serve start meanwhile and run one too.
        a = await Window(config_dir, guard).open()
        windows.append(a)
        turn_a = a.prompt(LONG)
        await running(a.lease_id)
        b = await Window(config_dir, guard).open()
        windows.append(b)
        turn_b = b.prompt(LONG)
        await running(b.lease_id)
        serve = await start_serve(config_dir, tmp_path / "serve.log")
        guard.track(serve.pid)
        await wait_healthy(port, serve)
        s = await Gateway(serve, port, secret).open()
        turn_s = s.prompt(LONG)
        results = await asyncio.gather(turn_a, turn_b, turn_s)
        assert all(done_with_exit_0(r) for r in results), results

        # Each process its own slot: its own instance id on its leases.
        install = (config_dir / "data" / "lifecycle" / "instance-id").read_text().strip()
        ids = {name: lease_of(leases_db, session_key(sid)).gateway_instance_id
               for name, sid in (("a", a.sid), ("b", b.sid), ("s", s.sid))}
        assert ids == {"a": install, "b": f"{install}-s1", "s": f"{install}-s2"}

        # 2. B dies by SIGKILL with its wrapper (as when the editor's process group is
        #    killed) while its agent runs a detached command: nothing of B is left to clean
        #    up after it, so its detached sleeper is an orphan until a start reaps it.
        #    (B's wrapper alone, or B alone, would have ended it themselves.)
        b_lease = b.lease_id
        orphan_turn = b.prompt(ORPHANS)
        await running(b_lease)
        await eventually(lambda: len(sleeps_of(b_lease)) == 2, 30.0, "B's detached sleeper")
        orphans = marked_with(b_lease)
        frozen = [psutil.Process(b.acp.proc.pid),
                  psutil.Process(lease_of(leases_db, session_key(b.sid)).root_pid)]
        for proc in frozen:  # stopped first: neither can react to the other's death
            proc.suspend()
        for proc in frozen:
            proc.kill()
        await asyncio.to_thread(b.acp.proc.wait)
        with pytest.raises(EOFError):
            await orphan_turn
        # A and serve keep working, and run a command through C's start.
        turn_a, turn_s = a.prompt(LONG), s.prompt(LONG)
        await running(a.lease_id)
        await running(lease_of(leases_db, session_key(s.sid)).lease_id)
        # The live processes' wrappers and agents: nobody but their own process may end them.
        bystanders = [psutil.Process(pid) for sid in (a.sid, s.sid)
                      for row in [lease_of(leases_db, session_key(sid))]
                      for pid in (row.root_pid, row.adapter_pid)]
        assert any(alive(p) for p in orphans), "B's orphans were never there"

        # 3. Window C takes B's slot and reaps exactly B's orphans.
        c = await Window(config_dir, guard).open()
        windows.append(c)
        assert lease_of(leases_db, session_key(c.sid)).gateway_instance_id == ids["b"]
        await eventually(lambda: not any(alive(p) for p in orphans), 30.0, "B's orphans reaped")
        (b_row,) = [r for r in read_leases(leases_db) if r.lease_id == b_lease]
        assert b_row.state in ("closed", "lost")
        results = await asyncio.gather(turn_a, turn_s)
        assert all(done_with_exit_0(r) for r in results), results
        assert all(alive(p) for p in bystanders), "a live process's agent was signalled"
        assert done_with_exit_0(await c.prompt(LONG))
        # Each process serves its own sessions: C cannot take A's live one over.
        error = await asyncio.to_thread(c.acp.error, "session/load", {"sessionId": a.sid})
        assert "already active" in error["message"], error

        # 4. A second serve on the same dir and port: refused at once, naming the first.
        second = await start_serve(config_dir, tmp_path / "second.log")
        guard.track(second.pid)
        assert await asyncio.wait_for(second.wait(), 60) != 0
        said = (tmp_path / "second.log").read_text()
        assert f"acpgate serve is already running on {cfg.data_dir} (pid {serve.pid}, port {port})" \
            in said, said
        for name in ("session.sock", "lifecycle.sock"):
            async with dial(cfg, f"unix:{cfg.data_dir}/run/{name}") as channel:
                await grpc_healthy(channel, within=10.0)
        assert done_with_exit_0(await s.prompt(LONG))

        # 5. Everything ends in order; no process of any slot is left.
        codes = [await asyncio.to_thread(w.acp.close) for w in (a, c)]
        assert codes == [0, 0]
        serve.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.wait(), 90) == 0
        leases = read_leases(leases_db)
        await eventually(lambda: not any(marked_with(r.lease_id) for r in leases), 30.0,
                         "every lease's processes gone")
        assert {r.state for r in leases} <= {"closed", "lost"}
    finally:
        for window in windows:
            window.acp.kill()
        if serve is not None and serve.returncode is None:
            serve.kill()
            await serve.wait()


async def test_a_second_lifecycle_service_leaves_the_first_ones_socket(
        tmp_path: Path, guard: ProcessGuard) -> None:
    """``acpgate lifecycle-service`` twice on one data dir: the second is refused (its
    socket is served), names the first, and the first's socket still answers."""
    from tests.lifecycle.conftest import make_config

    cfg = make_config(tmp_path / "gw")
    first = await start_service_process(cfg.config_dir, tmp_path / "first.log")
    guard.track(first.pid)
    address = f"unix:{cfg.data_dir}/run/lifecycle.sock"
    try:
        async with dial(cfg, address) as channel:
            await grpc_healthy(channel, within=30.0)
        second = await start_service_process(cfg.config_dir, tmp_path / "second.log")
        guard.track(second.pid)
        assert await asyncio.wait_for(second.wait(), 60) == 2
        said = (tmp_path / "second.log").read_text()
        assert f"unix socket {cfg.data_dir}/run/lifecycle.sock is in use (by pid {first.pid})" \
            in said, said
        async with dial(cfg, address) as channel:
            await grpc_healthy(channel, within=10.0)
    finally:
        if first.returncode is None:
            first.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(first.wait(), 30) == 0


def child_pid(serve_pid: int, command: str) -> int | None:
    """The PID of serve's child running ``acpgate <command>``, if one runs."""
    for child in psutil.Process(serve_pid).children():
        try:
            if command in child.cmdline():
                return child.pid
        except psutil.Error:
            continue
    return None


async def test_kill_9_of_serve_or_its_lifecycle_child_leaves_no_orphan(
        tmp_path: Path, guard: ProcessGuard) -> None:
    """kill -9 of serve's lifecycle child: serve restarts it on the slot serve holds (the
    same instance id its edge claims sessions under), which re-adopts the session's tree
    (detached descendants included) instead of reaping it. kill -9 of serve itself, restarted at
    once: the new serve serves on the same slot, re-adopts the old agents within their window
    and, no edge re-attaching to them, closes them; nothing of the old one is left."""
    config_dir = tmp_path / "cfg"
    config_dir.mkdir()
    port = free_port()
    (config_dir / "config.toml").write_text(
        CONFIG.format(port=port) + "\n[lifecycle]\nterm_grace_ms = 3000\n", encoding="utf-8")
    cfg = load_config(config_dir, environ=config_environ())
    _, secret = mint(cfg)
    leases_db = config_dir / LEASES_DB
    lifecycle_addr = f"unix:{cfg.data_dir}/run/lifecycle.sock"

    async def instance() -> Any:
        from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc

        async with dial(cfg, lifecycle_addr) as channel:
            await grpc_healthy(channel, within=60.0)
            return await lifecycle_pb2_grpc.LifecycleServiceStub(channel).GetInstance(
                lifecycle_pb2.GetInstanceRequest())

    async def orphans_of(gateway: Gateway, command: str = ORPHANS,
                         ) -> tuple[asyncio.Task[Any], list[psutil.Process]]:
        # Right after a restart of the lifecycle service the edge's channel to it may still
        # be in its reconnect backoff: session/new is refused until it has reconnected.
        for _ in range(120):
            try:
                session = await Gateway(gateway.proc, port, secret).open()
                break
            except AssertionError as exc:
                assert "failed to connect" in str(exc), exc
                await asyncio.sleep(0.5)
        assert session.client is not None
        turn = asyncio.create_task(session.client.call(
            "session/prompt", {"sessionId": session.sid, "prompt": command}))
        lease = lease_of(leases_db, session_key(session.sid)).lease_id
        await eventually(lambda: len(sleeps_of(lease)) == 2, 60.0, "the detached sleeper")
        return turn, marked_with(lease)

    serve = await start_serve(config_dir, tmp_path / "serve.log")
    guard.track(serve.pid)
    second: asyncio.subprocess.Process | None = None
    try:
        await wait_healthy(port, serve)
        gateway = Gateway(serve, port, secret)
        before = await instance()
        slot_file = str(cfg.lifecycle_state_dir / "slots" / f"{before.slot}.lock")
        assert slot_file in [f.path for f in psutil.Process(serve.pid).open_files()]

        # 1. kill -9 of the lifecycle child.
        turn, orphans = await orphans_of(gateway)
        lifecycle = child_pid(serve.pid, "lifecycle-service")
        assert lifecycle is not None
        os.kill(lifecycle, signal.SIGKILL)
        after = await instance()
        assert (after.slot, after.gateway_instance_id) == (before.slot, before.gateway_instance_id)
        assert after.started_at > before.started_at
        assert all(alive(p) for p in orphans), "re-adopted: the session's tree lives on"
        turn.cancel()

        # 2. kill -9 of serve, and a new one at once.
        _, orphans = await orphans_of(gateway, STUBBORN_ORPHANS)
        old_tree = [serve.pid, *(c.pid for c in psutil.Process(serve.pid).children(True))]
        serve.kill()
        await serve.wait()
        second = await start_serve(config_dir, tmp_path / "second.log")
        guard.track(second.pid)
        await wait_healthy(port, second)
        # The new serve re-adopts what the old one's agents left within their window; no
        # edge re-attaches to them (the old edge died), so they are closed after the wait.
        await eventually(lambda: not any(alive(p) for p in orphans), 90.0,
                         "the old serve's agents to be closed")
        await eventually(lambda: not [pid for pid in old_tree if pid_alive(pid)], 30.0,
                         "nothing of the old serve left")
        assert (await instance()).gateway_instance_id == before.gateway_instance_id
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 90) == 0
        leases = read_leases(leases_db)
        assert not any(marked_with(r.lease_id) for r in leases)
    finally:
        for proc in (serve, second):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
