"""Killing a real ``acpgate serve``'s lifecycle service under streaming sessions.

Shared by the chaos test (which asserts nothing is lost) and ``make bench`` (which also
reports how long the service took to serve again). Every process is found through what
the gateway recorded (its lease store) and checked by identity, never guessed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.lifecycle.api.server import SERVICE_NAME
from services.lifecycle.processes.verify import LEASE_ENV
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import WAIT, Gateway

LIFECYCLE_COMMAND = "lifecycle-service"


@dataclass
class Turn:
    """One client's streaming turn: the chunks it got, in order, and how it ended."""

    session_id: str
    chunks: list[str] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)


def agents(gw: Gateway) -> dict[str, int]:
    """Lease id → adapter PID of every open lease, each checked alive and carrying its
    lease id in its environment."""
    db = sqlite3.connect(gw.data_dir / "lifecycle" / "leases.db")
    try:
        rows = db.execute("SELECT lease_id, adapter_pid FROM leases WHERE state = 'open'").fetchall()
    finally:
        db.close()
    live: dict[str, int] = {}
    for lease_id, pid in rows:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(LEASE_ENV) == lease_id:
                live[lease_id] = pid
    return live


def alive(pids: list[int]) -> list[int]:
    """The PIDs of ``pids`` still running (not zombies)."""
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
    return out


def lifecycle_pid(gw: Gateway) -> int | None:
    """The PID of serve's lifecycle child, if one runs."""
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(gw.proc.pid).children():
            with contextlib.suppress(psutil.Error):
                if LIFECYCLE_COMMAND in child.cmdline():
                    return child.pid
    return None


async def start_turns(gw: Gateway, count: int, chunks: int, alias: str) -> list[tuple[RawClient, Turn, int]]:
    """``count`` clients, each with a session of ``alias`` streaming ``chunks`` chunks; returns
    once every one has had its first chunk."""
    token = await gw.token("chaos")
    started = []
    for _ in range(count):
        client = RawClient(await gw.connect(token))
        sid = (await client.result("session/new", {"agentAlias": alias}))["sessionId"]
        req = await client.send("session/prompt", {"sessionId": sid, "prompt": f"stream {chunks}"})
        started.append((client, Turn(sid), req))
    for client, turn, _ in started:
        await _read_until(client, turn, first_chunk=True)
    return started


async def _read_until(client: RawClient, turn: Turn, req: int = 0, first_chunk: bool = False) -> None:
    while True:
        msg = json.loads(await asyncio.wait_for(client.ws.recv(), WAIT))
        if msg.get("method") == "session/update":
            update = msg["params"]["update"]
            if update.get("sessionUpdate") == "agent_message_chunk":
                turn.chunks.append(update["content"]["text"])
                if first_chunk:
                    return
        elif req and msg.get("id") == req and "method" not in msg:
            turn.response = msg
            return


async def finish_turns(started: list[tuple[RawClient, Turn, int]]) -> list[Turn]:
    """Read every turn to its prompt response; the turns."""
    await asyncio.gather(*(_read_until(c, t, req) for c, t, req in started))
    for client, _, _ in started:
        await client.ws.close()
    return [t for _, t, _ in started]


async def _serving(address: str) -> bool:
    channel = grpc.aio.insecure_channel(address)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=1.0)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.aio.AioRpcError:
        return False
    finally:
        await channel.close(None)


async def kill_lifecycle(gw: Gateway) -> tuple[int, float]:
    """``kill -9`` serve's lifecycle child; (its PID, seconds until its successor's health
    check said SERVING: it had re-adopted and reaped by then)."""
    pid = lifecycle_pid(gw)
    assert pid is not None, "serve has no lifecycle child"
    address = f"unix:{gw.data_dir}/run/lifecycle.sock"
    began = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while True:
        new = lifecycle_pid(gw)
        if new is not None and new != pid and await _serving(address):
            return pid, time.monotonic() - began
        if time.monotonic() - began > WAIT:
            raise AssertionError("the lifecycle service never came back:\n" + gw.log.read_text())
        await asyncio.sleep(0.02)
