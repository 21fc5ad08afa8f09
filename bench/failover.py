"""Failover across hosts: ``killpg -9`` of host A mid-turn → host B serves A's session.

Two ``acpgate serve`` stacks (each its own stage: config, data dir, port) on one
throwaway PostgreSQL cluster (:mod:`tests.pg_cluster`), one token file, ``[store]
lease_secs`` at its default (30). Per round: a client on A opens a session, stores a
turn, and starts a streaming one (``pace``); A's whole stack is killed (SIGKILL of
every process, serve frozen first so nothing restarts); a client on B asks
``session/load`` of that session until it answers a result. The figure is the time
from the kill to that result; the notes count B's answers that pointed the client at
A (-32007 or ``liveAt`` naming A's URL) — there should be none. Host A is started
again for the next round. Without the server binaries the row is left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any

import psutil
from websockets.asyncio.client import ClientConnection, connect

from bench.pg_bench import BENCH_DATABASE, BENCH_SETTINGS
from bench.sizes import Sizes
from bench.stage import Serve, serve, stage
from bench.stats import Dist, Row
from services.common.protocol import SESSION_LIVE_ELSEWHERE
from tests.pg_cluster import missing_reason, running_cluster

__all__ = ["run_failover"]

TARGET_SECS = 2.0
#: ``[store] lease_secs`` of both hosts: the default, what failover took before.
LEASE_SECS = 30
#: B gives up on a round after this long (far past the lease: a broken mechanism shows).
GIVE_UP_SECS = 3 * LEASE_SECS


class Client:
    """A bare JSON-RPC client over one WebSocket (notifications are skipped)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._next = 0

    async def send(self, method: str, params: dict[str, Any]) -> int:
        self._next += 1
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self._next, "method": method,
                                       "params": params}))
        return self._next

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        req = await self.send(method, params)
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == req and "method" not in msg:
                return dict(msg)


def _kill_stack(sv: Serve) -> None:
    """SIGKILL of the whole stack at once: serve frozen first (no restart, no clean stop)."""
    os.kill(sv.proc.pid, signal.SIGSTOP)
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(sv.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    os.kill(sv.proc.pid, signal.SIGKILL)


async def _round(a_stage: Any, b_url: str, token: str) -> tuple[float, int]:
    """One crash of host A; (seconds until B loaded A's session, B's answers naming A)."""
    headers = {"Authorization": f"Bearer {token}"}
    pointed = 0
    async with serve(a_stage) as sv_a, \
            connect(a_stage.ws_url, proxy=None, additional_headers=headers) as ws_a, \
            connect(b_url, proxy=None, additional_headers=headers) as ws_b:
        on_a, on_b = Client(ws_a), Client(ws_b)
        sid = (await on_a.call("session/new", {"cwd": str(a_stage.workspace),
                                               "mcpServers": []}))["result"]["sessionId"]
        await on_a.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "stored before the crash"}]})
        await on_a.send("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "pace 100000 10"}]})
        await ws_a.recv()  # the turn streams
        _kill_stack(sv_a)
        killed = time.monotonic()
        while time.monotonic() - killed < GIVE_UP_SECS:
            resp = await on_b.call("session/load", {"sessionId": sid, "cwd": str(
                a_stage.workspace), "mcpServers": []})
            if "result" in resp:
                return time.monotonic() - killed, pointed
            error = resp.get("error", {})
            live_at = ((error.get("data") or {}).get("acpgate") or {}).get("liveAt") or {}
            if error.get("code") == SESSION_LIVE_ELSEWHERE or live_at.get("url") == a_stage.ws_url:
                pointed += 1
            await asyncio.sleep(0.05)
    return float(GIVE_UP_SECS), pointed


async def run_failover(sizes: Sizes, skipped: list[str]) -> list[Row]:
    """The failover row (none, with the reason in ``skipped``, without PostgreSQL)."""
    reason = missing_reason()
    if reason:
        skipped.append(f"failover row: {reason}")
        return []
    rounds = max(1, sizes.reap_samples)
    with running_cluster(BENCH_SETTINGS) as cluster:
        await asyncio.to_thread(cluster.create_database, BENCH_DATABASE)
        url = cluster.dsn(BENCH_DATABASE)
        async with stage(store_url=url, warm=0) as st_a, \
                stage(store_url=url, warm=0) as st_b:
            env = {"ACPGATE_store__lease_secs": str(LEASE_SECS),
                   "ACPGATE_gateway__token_db": str(st_b.root / "tokens.db")}
            st_a.env.update(env, ACPGATE_gateway__public_url=st_a.ws_url)
            st_b.env.update(env, ACPGATE_gateway__public_url=st_b.ws_url)
            from services.edge.tokens import TokenStore

            token = TokenStore(st_b.root / "tokens.db").create("bench")[1]
            st_a.workspace.mkdir(exist_ok=True)
            samples: list[float] = []
            pointed = 0
            async with serve(st_b):
                for _ in range(rounds):
                    took, named = await _round(st_a, st_b.ws_url, token)
                    samples.append(took)
                    pointed += named
    value = Dist.of(samples)
    return [Row("failover", "killpg -9 of host A mid-turn → B answers session/load", "s",
                value, f"lease_secs ({LEASE_SECS}): claims expired by time",
                Dist.of([float(LEASE_SECS)]), f"≤ {TARGET_SECS:g} s",
                value.p99 <= TARGET_SECS,
                f"{rounds} rounds; answers of B pointing at dead A: {pointed}; "
                "PostgreSQL 15, unix socket")]
