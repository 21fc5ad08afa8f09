"""``acpgate serve --replace`` under streaming sessions: a hot restart loses nothing.

A real ``acpgate serve``, a streaming external agent and WebSocket clients. While every
turn streams, a second ``acpgate serve --replace`` of the same config starts: the old
serve hands it the listening socket, the serve lock and its instance slot, its edge
steps down (the clients' WebSockets close 1012) and its lifecycle service steps down
leaving the wrappers to be adopted. Meanwhile a probe keeps connecting to the port.
Then every client reconnects and attaches after the last event id it saw: every chunk
arrives exactly once, every turn completes, no agent's PID changed, the old serve
exited 0, the port never refused a connection; SIGTERM of the new serve stops everything
and leaves no process behind.
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

import psutil
import pytest
from websockets.exceptions import ConnectionClosed

from tests.chaos.edge_worker_kill import WAIT, Stream, agent_pids, read_until
from tests.chaos.lifecycle_kill import alive
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import Served, dial, serve_workers, until
from tests.gateway.wsfixtures import http_get
from tests.security.procs import eventually
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 3
CHUNKS = 120


async def drain_until_closed(client: RawClient, stream: Stream) -> int | None:
    """Read what the old edge still sent until its close; the close code received."""
    try:
        while True:
            stream.see(json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)))
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd is not None else None


async def reattach(served: Served, stream: Stream) -> RawClient:
    """Reconnect, attach after the last event id seen, read until the turn completes."""
    client = RawClient(await dial(served))
    await client.result("initialize", {"protocolVersion": 1})
    req = await client.send("session/attach", {
        "sessionId": stream.session_id, "role": "controller",
        "historyPolicy": "after_message", "afterMessageId": stream.last_event})
    while stream.completed is None:
        msg = json.loads(await asyncio.wait_for(client.ws.recv(), WAIT))
        if msg.get("id") == req and "method" not in msg:
            assert "result" in msg, msg
            continue
        stream.see(msg)
    return client


class Probe:
    """Connects to the port again and again, counting the connections refused."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.tries = 0
        self.refused = 0
        self.done = asyncio.Event()

    async def run(self) -> None:
        while not self.done.is_set():
            self.tries += 1
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except ConnectionRefusedError:
                self.refused += 1
            else:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            await asyncio.sleep(0.05)


def tree(pid: int) -> list[int]:
    """``pid``'s descendants now."""
    with contextlib.suppress(psutil.Error):
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    return []


async def replace(served: Served, log: Path) -> asyncio.subprocess.Process:
    """``acpgate serve --replace`` of ``served``'s config, its stderr in ``log``."""
    env = {**os.environ, "ACPGATE_LOG_LEVEL": "info"}
    with log.open("wb") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "acpgate", "serve", "--replace",
            "--config-dir", str(served.cfg.config_dir),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err,
            env=env)


def log_events(log: Path) -> list[dict[str, Any]]:
    """The JSON log lines of a serve's output."""
    out = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            event = json.loads(line)
            if isinstance(event, dict):
                out.append(event)
    return out


async def test_serve_replace_keeps_every_turn_agent_and_connection(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with serve_workers(tmp_path, workers=1, detach_grace_secs=600,
                             extra=agent_section("scripted")) as served:
        started: list[tuple[RawClient, Stream]] = []
        for _ in range(SESSIONS):
            client = RawClient(await dial(served))
            await client.result("initialize", {"protocolVersion": 1})
            sid = (await client.result("session/new", {"cwd": str(work),
                                                       "agentAlias": "scripted"}))["sessionId"]
            await client.send("session/prompt", {"sessionId": sid, "prompt": f"stream {CHUNKS}"})
            started.append((client, Stream(sid)))
        await asyncio.gather(*(read_until(c, s, 5) for c, s in started))
        before = agent_pids(served)
        assert len(before) == SESSIONS
        probe = Probe(served.port)
        probing = asyncio.create_task(probe.run())
        new = await replace(served, tmp_path / "serve2.log")
        try:
            codes = await asyncio.gather(*(drain_until_closed(c, s) for c, s in started))
            assert codes == [1012] * SESSIONS, codes
            assert all(len(s.chunks) < CHUNKS for _, s in started), "the restart came mid-turn"
            assert await asyncio.wait_for(served.proc.wait(), WAIT * 2) == 0

            async def serving() -> bool:
                assert new.returncode is None, "the new serve exited"
                with contextlib.suppress(OSError):
                    status, _, _ = await http_get(f"http://127.0.0.1:{served.port}/healthz")
                    return status == 200
                return False
            await until(serving, "the new serve serving", tries=2400)
            notes = list((served.cfg.data_dir / "run").glob("*.running.json"))
            assert not notes, "the successor removed the hand-over note it read"
            assert any(e.get("event") == "sessions_readopted"
                       and e.get("noted_running") == SESSIONS
                       for e in log_events(tmp_path / "serve2.log")), \
                "the note named every running turn"
            streams = [s for _, s in started]
            clients = await asyncio.gather(*(reattach(served, s) for s in streams))
            probe.done.set()
            await probing
            assert probe.refused == 0 and probe.tries > 0, (probe.refused, probe.tries)
            for stream in streams:
                assert stream.chunks == [f"chunk {i} " for i in range(CHUNKS)], stream.session_id
                assert stream.completed is not None
                assert stream.completed.get("stopReason") == "end_turn"
            assert agent_pids(served) == before, "no agent died or was replaced"
            for client in clients:
                await client.ws.close()
            children = tree(new.pid)
            assert children
            new.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(new.wait(), WAIT * 2) == 0
            await eventually(lambda: not alive([*children, *before.values()]), WAIT,
                             "every process of the new serve to be gone")
        finally:
            probe.done.set()
            if new.returncode is None:
                new.kill()
                await new.wait()


async def test_sigusr2_starts_the_successor_itself(tmp_path: Path) -> None:
    async with serve_workers(tmp_path, workers=1) as served:
        lock = served.cfg.data_dir / "run" / "serve.lock"
        served.proc.send_signal(signal.SIGUSR2)
        assert await asyncio.wait_for(served.proc.wait(), WAIT * 2) == 0
        holder = int(lock.read_text().split()[0])
        assert holder != served.proc.pid
        try:
            async def serving() -> bool:
                with contextlib.suppress(OSError):
                    status, _, _ = await http_get(f"http://127.0.0.1:{served.port}/healthz")
                    return status == 200
                return False
            await until(serving, "the successor serving", tries=2400)
            children = tree(holder)
            assert children
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGTERM)
        await eventually(lambda: not alive([holder, *children]), WAIT,
                         "the successor and its children to be gone")
