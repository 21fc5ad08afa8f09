"""``acpgate serve`` with several edge workers: ready only when every worker serves, and
the port's connections shared among them.

Real processes: serve, its services and its edge workers on one listening socket.
``/healthz`` answers 200 only when every worker serves (503 naming the others
before), ``/metrics`` counts each worker's connections
(``acpgate_worker_connections``), a burst of connections lands on every worker,
and a worker killed with SIGKILL is named by ``/healthz`` until its successor
serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from .stack import RawClient, select
from .workers_serve import client_on, dial, kill_worker, serve_workers, until, worker_pid

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_a_client_right_after_healthz_reaches_every_worker(tmp_path: Path) -> None:
    async with serve_workers(tmp_path, settle=False) as served:
        # The very first 200: both workers serve already.
        status, body = await served.health_status()
        assert status == 200 and body["workers"] == 2 and "waiting_for" not in body
        ws = await dial(served, query="worker=2")  # before: 503, worker 2 not serving yet
        client = RawClient(ws, select("allow-once"))
        await client.result("initialize", {"protocolVersion": 1})
        sid = (await client.result("session/new", {}))["sessionId"]
        assert sid
        await ws.close()
        # serve said it was ready only once both workers had said they serve.
        events = [e.get("event") for e in served.events()]
        assert events.index("serve_workers_serving") < events.index("serve_ready")


async def test_the_gauge_counts_each_workers_connections(tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        on_1 = [await client_on(served, 1), await client_on(served, 1)]
        on_2 = [await client_on(served, 2)]
        assert all(c is not None for c in on_1 + on_2)

        # Each worker's, and the summed view intact: the host's are every worker's. (Each
        # answer is one worker's: its own count now, the others' as last reported.)
        async def counted() -> bool:
            return (await served.worker_connections() == {1: 2, 2: 1}
                    and await served.metric("acpgate_ws_connections") == 3)
        await until(counted, "/metrics counting 2 connections on worker 1, 1 on worker 2")


async def test_a_burst_of_connections_lands_on_every_worker(tmp_path: Path) -> None:
    burst = 40
    room = {"ACPGATE_gateway__max_connections": str(burst + 8),
            "ACPGATE_gateway__max_connections_per_token": str(burst + 8)}
    async with serve_workers(tmp_path, workers=3, env=room) as served:
        conns = await asyncio.gather(*(dial(served) for _ in range(burst)))
        seen: dict[int, int] = {}

        async def all_counted() -> bool:
            seen.clear()
            seen.update(await served.worker_connections())
            return sum(seen.values()) == burst and len(seen) == 3
        await until(all_counted, f"/metrics counting the {burst} connections")
        assert all(seen[n] > 0 for n in (1, 2, 3)), seen
        await asyncio.gather(*(c.close() for c in conns))


async def test_healthz_names_a_killed_worker_until_its_successor_serves(tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        # serve stopped: nothing reaps or restarts the killed worker meanwhile.
        os.kill(served.proc.pid, signal.SIGSTOP)
        try:
            old = kill_worker(served, 2)

            async def named() -> bool:
                status, body = await served.health_status()
                return status == 503 and body.get("waiting_for") == ["edge worker 2"]
            await until(named, "/healthz naming the killed worker 2")
            body = await served.health()
            assert body["workers"] == 1 and body["status"] == "degraded"
        finally:
            os.kill(served.proc.pid, signal.SIGCONT)

        async def back() -> bool:
            status, body = await served.health_status()
            return status == 200 and body["workers"] == 2
        await until(back, "/healthz 200 with worker 2's successor serving")
        assert worker_pid(served, 2) != old
        client = await client_on(served, 2)
        assert client is not None
        await client.result("session/new", {})
        assert json.dumps(await served.health()).count("waiting_for") == 0
