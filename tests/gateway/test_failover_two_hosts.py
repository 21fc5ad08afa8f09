"""Failover between two `acpgate serve` stacks on one PostgreSQL store, by host liveness.

The lease (``[store] lease_secs``) is 300 s, longer than this test runs: whatever
another host takes over here it takes because the dead host's liveness lock is gone
(its session service's connection ended), never because a claim expired.

- Host A paused (SIGSTOP of its whole stack) mid-turn while the server drops every
  connection of A's session service, as its TCP keepalives do for a host cut off — a
  partition: B loads A's session; when A resumes, the turn it was running is not
  stored (-32005 to A's client, the claim generation fences it) and B's session goes on.
- Host A killed (SIGKILL of its whole stack) mid-turn: its lock goes by itself with its
  session service's connection; from then on B loads A's session with what A's client
  had, and no answer of B ever sends a client to A.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import psutil
import pytest

from services.common.protocol import (
    MSG_SESSION_TAKEN_OVER,
    SESSION_LIVE_ELSEWHERE,
    SESSION_TAKEN_OVER,
)
from services.edge.tokens import TokenStore
from services.session.store.postgres.liveness import NAMESPACE, host_of
from tests.pg_cluster import Cluster

from .stack import RawClient
from .test_serve import children_by_command
from .test_serve_two_hosts import Host, client, replayed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: Far longer than the test: a takeover here is never a claim's lease running out.
LEASE_SECS = 300
#: How many times B tries before the test gives up (a bound, not a timing assertion).
TRIES = 200


class Asked:
    """A permission handler that allows once and says that the turn reached its tool."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def __call__(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.event.set()
        return {"outcome": {"outcome": "selected", "optionId": "allow-once"}}


async def running_turn(on_a: RawClient, sid: str, command: str,
                       asked: Asked) -> asyncio.Task[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Start ``command`` as a prompt and return once its tool is running; the task that reads
    the prompt's answer."""
    req = await on_a.send("session/prompt", {"sessionId": sid, "prompt": command})
    answer = asyncio.create_task(on_a.until_response(req))
    await asyncio.wait({answer, asyncio.create_task(asked.event.wait())},
                       return_when=asyncio.FIRST_COMPLETED)
    assert asked.event.is_set(), answer.result()
    return answer


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


#: The host lock of the instance id in ``$2`` (``$1``: :data:`NAMESPACE`) in ``pg_locks``.
LOCK_OF = ("locktype = 'advisory' AND classid = $1::oid AND objsubid = 2"
           " AND objid = hashtext($2)::oid")


async def lock_gone(con: asyncpg.Connection[asyncpg.Record], instance_id: str) -> None:
    """Wait until nobody holds the host lock of ``instance_id`` (bounded: it must go by
    itself with its connection, long before the lease)."""
    for _ in range(TRIES):
        if not await con.fetchval(f"SELECT count(*) FROM pg_locks WHERE {LOCK_OF}",
                                  NAMESPACE, host_of(instance_id)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the liveness connection did not end")


def session_service(host: Host) -> int:
    """The pid of ``host``'s session service."""
    return children_by_command(host.pid)["session-service"]


async def partition(url: str, host: Host, instance_id: str) -> None:
    """End, from the server's side, every connection of ``host``'s session service — its
    liveness connection and its pool's, as the server's keepalives do for a host cut off —
    and wait until its host lock is gone. (Ending only the liveness connection would leave
    a paused transaction of the pool holding a session's row, which the taking host's
    claim then waits on.)"""
    ports = [c.laddr.port for c in psutil.Process(session_service(host)).net_connections("tcp")
             if c.raddr and c.raddr.port == urlsplit(url).port]
    con = await asyncpg.connect(url)
    try:
        holder = await con.fetchval(f"SELECT pid FROM pg_locks WHERE {LOCK_OF}",
                                    NAMESPACE, host_of(instance_id))
        ended = await con.fetch("SELECT pid, pg_terminate_backend(pid) AS ended"
                                " FROM pg_stat_activity WHERE client_port = ANY($1::int[])",
                                ports)
        assert all(r["ended"] for r in ended) and holder in {r["pid"] for r in ended}, ended
        await lock_gone(con, instance_id)
    finally:
        await con.close()


async def crashed(url: str, host: Host, instance_id: str) -> None:
    """Kill ``host``'s whole stack (:meth:`Host.crash`) and wait until PostgreSQL has seen its
    session service's connection end. ``kill`` returns before the kernel has torn the killed
    process down and the server has read the end of its connection: until then the host's
    lock is still held and another host rightly still names it."""
    con = await asyncpg.connect(url)
    try:
        host.crash()
        await lock_gone(con, instance_id)
    finally:
        await con.close()


async def load_on(on_b: RawClient, sid: str, dead_url: str) -> list[dict[str, Any]]:
    """``session/load`` of ``sid`` on B until it succeeds (an attach before each try); the
    load's replay. No answer may send the client to ``dead_url``."""
    for _ in range(TRIES):
        _, attach = await on_b.call("session/attach", {"sessionId": sid})
        seen, resp = await on_b.call("session/load", {"sessionId": sid})
        for answer in (attach, resp):
            error = answer.get("error") or {}
            live_at = (error.get("data") or {}).get("acpgate", {}).get("liveAt", {})
            assert error.get("code") != SESSION_LIVE_ELSEWHERE and \
                live_at.get("url") != dead_url, answer
        if "result" in resp:
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError("B never loaded the session")


async def test_a_paused_host_is_fenced_and_a_killed_host_fails_over(
        tmp_path: Path, pg_cluster: Cluster) -> None:
    from tests.conftest import TEST_DATABASE, fresh_url

    # Over TCP, as hosts reach a shared server: keepalives, and each connection's port.
    schema = parse_qs(urlsplit(await fresh_url(pg_cluster)).query)["search_path"][0]
    url = pg_cluster.dsn(TEST_DATABASE, schema=schema, tcp=True, password=True)
    tokens = tmp_path / "shared" / "tokens.db"
    env = {"ACPGATE_store__url": url, "ACPGATE_store__lease_secs": str(LEASE_SECS),
           "ACPGATE_gateway__token_db": str(tokens)}
    a, b = Host(tmp_path, "a", env), Host(tmp_path, "b", env)
    _, secret = TokenStore(tokens).create("alice")
    paused: list[int] = []
    try:
        await asyncio.gather(a.start(), b.start())
        id_a = await a.instance_id()
        async with client(a, secret) as on_a, client(b, secret) as on_b:
            # 1. A partitioned mid-turn: paused, its liveness connection dropped by the server.
            asked = Asked()
            on_a.on_request = asked
            cut_off = (await on_a.result("session/new", {}))["sessionId"]
            answer = await running_turn(on_a, cut_off, "!sleep 3", asked)
            paused = a.tree()
            signal_all(paused, signal.SIGSTOP)
            await partition(url, a, id_a)
            await load_on(on_b, cut_off, a.url)
            res = await on_b.result("session/prompt", {"sessionId": cut_off, "prompt": "on b"})
            assert res["stopReason"] == "end_turn"
            signal_all(paused, signal.SIGCONT)
            paused = []
            _, resp = await answer
            assert resp.get("error") == {
                "code": SESSION_TAKEN_OVER,
                "message": MSG_SESSION_TAKEN_OVER.format(session_id=cut_off)}, resp
            _, resp = await on_b.call("session/prompt", {"sessionId": cut_off, "prompt": "still"})
            assert resp["result"]["stopReason"] == "end_turn", resp  # B's, untouched by A

            # 2. A killed mid-turn: B loads what A's client had, never pointing at A.
            asked = Asked()
            on_a.on_request = asked
            held = (await on_a.result("session/new", {}))["sessionId"]
            res = await on_a.result("session/prompt", {"sessionId": held,
                                                       "prompt": "before the crash"})
            assert res["stopReason"] == "end_turn"
            answer = await running_turn(on_a, held, "!sleep 30", asked)
            _, resp = await on_b.call("session/attach", {"sessionId": held})
            assert resp["error"]["data"]["acpgate"]["liveAt"]["url"] == a.url  # A lives
            await crashed(url, a, id_a)  # nobody ended its connection but the kernel
            seen = await load_on(on_b, held, a.url)
            assert replayed(seen, "user_message_chunk")[0] == "before the crash"
            res = await on_b.result("session/prompt", {"sessionId": held, "prompt": "after"})
            assert res["stopReason"] == "end_turn"
            answer.cancel()
            with contextlib.suppress(BaseException):
                await answer
    finally:
        signal_all(paused, signal.SIGCONT)
        for host in (a, b):
            if host.proc is not None and host.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(host.pid, signal.SIGCONT)
        await asyncio.gather(a.stop(), b.stop())
