"""Two `acpgate serve` stacks — two gateway hosts — sharing one PostgreSQL store.

Each stack has its own config and data dir (so its own gateway instance id,
leases and lifecycle service) and OS-chosen ports; both get the same
``ACPGATE_store__url`` (a fresh schema of the session's throwaway cluster),
``ACPGATE_store__lease_secs`` and token file. A session created through host
A, closed, is loaded and prompted through host B with the full history. A
session active on A is refused by B; after kill -9 of A's whole stack, B
loads it once A's claim has expired. Host B's lifecycle service only ever
leases (and so only ever signals) its own processes, and A's adapters end by
A's own wrappers' parent-death watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2, lifecycle_pb2_grpc
from services.common.protocol import MSG_SESSION_ALREADY_ACTIVE, SESSION_LIVE_ELSEWHERE
from services.edge.tokens import TokenStore
from tests.launches import dial
from tests.pg_cluster import Cluster

from .stack import RawClient, select
from .test_serve import alive, children_by_command, events
from .wsfixtures import free_port, start_serve, wait_healthy, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASE_SECS = 3


class Host:
    """One `acpgate serve` stack and what the test needs to reach it."""

    def __init__(self, root: Path, name: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.cfg = write_config(root / name / "cfg", port=self.port)
        self.log = root / f"{name}.log"
        #: Where clients reach it (another host's -32007 names it).
        self.url = f"ws://127.0.0.1:{self.port}/acp"
        self.env = {**env, "ACPGATE_gateway__public_url": self.url}
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await start_serve(self.cfg.config_dir, self.log, self.env)
        await wait_healthy(self.port, self.proc)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def tree(self) -> list[int]:
        return [self.pid, *(p.pid for p in psutil.Process(self.pid).children(recursive=True))]

    async def leases(self) -> list[lifecycle_pb2.Lease]:
        async with dial(self.cfg, f"unix:{self.cfg.data_dir}/run/lifecycle.sock") as ch:
            reply = await lifecycle_pb2_grpc.LifecycleServiceStub(ch).ListLeases(
                lifecycle_pb2.ListLeasesRequest(), timeout=10)
        return list(reply.leases)

    async def instance_id(self) -> str:
        async with dial(self.cfg, f"unix:{self.cfg.data_dir}/run/lifecycle.sock") as ch:
            reply = await lifecycle_pb2_grpc.LifecycleServiceStub(ch).GetInstance(
                lifecycle_pb2.GetInstanceRequest(), timeout=10)
        return reply.gateway_instance_id

    def crash(self) -> None:
        """kill -9 of the whole stack at once, as a host dying: serve is frozen first so
        it neither restarts a child nor lets one shut down gracefully."""
        os.kill(self.pid, signal.SIGSTOP)
        for pid in children_by_command(self.pid).values():
            os.kill(pid, signal.SIGKILL)
        os.kill(self.pid, signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 90)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


@contextlib.asynccontextmanager
async def client(host: Host, secret: str) -> AsyncIterator[RawClient]:
    async with connect(f"ws://127.0.0.1:{host.port}/acp", proxy=None,
                       additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
        yield RawClient(ws, select("allow-once"))


def replayed(seen: list[dict[str, Any]], kind: str) -> list[str]:
    return [m["params"]["update"]["content"]["text"] for m in seen
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == kind]


async def gone(pids: list[int], within: float) -> list[int]:
    """The pids of ``pids`` still running after up to ``within`` seconds."""
    for _ in range(int(within / 0.1)):
        if not alive(pids):
            break
        await asyncio.sleep(0.1)
    return alive(pids)


async def test_two_serve_stacks_one_store_and_a_host_crash(tmp_path: Path,
                                                           pg_cluster: Cluster) -> None:
    from tests.conftest import fresh_url

    tokens = tmp_path / "shared" / "tokens.db"
    env = {"ACPGATE_store__url": await fresh_url(pg_cluster),
           "ACPGATE_store__lease_secs": str(LEASE_SECS),
           "ACPGATE_gateway__token_db": str(tokens)}
    a, b = Host(tmp_path, "a", env), Host(tmp_path, "b", env)
    _, secret = TokenStore(tokens).create("alice")
    try:
        await asyncio.gather(a.start(), b.start())
        id_a, id_b = await a.instance_id(), await b.instance_id()
        assert id_a != id_b

        # 1. Created and prompted through A, closed; loaded and prompted through B.
        async with client(a, secret) as on_a:
            moved = (await on_a.result("session/new", {}))["sessionId"]
            res = await on_a.result("session/prompt", {"sessionId": moved,
                                                       "prompt": "!echo written-on-a"})
            assert res["stopReason"] == "end_turn" and "written-on-a" in res["content"]
            await on_a.result("session/close", {"sessionId": moved})
        async with client(b, secret) as on_b:
            seen, resp = await on_b.call("session/load", {"sessionId": moved})
            assert set(resp["result"]) == {"modes", "configOptions"}
            assert replayed(seen, "user_message_chunk") == ["!echo written-on-a"]
            updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
            assert any("written-on-a" in str(u.get("rawOutput")) for u in updates
                       if u["sessionUpdate"] == "tool_call_update")
            res = await on_b.result("session/prompt", {"sessionId": moved, "prompt": "on b"})
            assert res["stopReason"] == "end_turn" and "on b" in res["content"]
            await on_b.result("session/close", {"sessionId": moved})

        # 2. Active on A: B refuses it. Then host A dies (kill -9 of its whole stack).
        async with contextlib.AsyncExitStack() as on_a_scope:
            on_a = await on_a_scope.enter_async_context(client(a, secret))
            held = (await on_a.result("session/new", {}))["sessionId"]
            await on_a.result("session/prompt", {"sessionId": held, "prompt": "before the crash"})
            a_processes = a.tree()
            assert len(a_processes) >= 6  # serve, three services, wrapper, adapter
            on_b = await on_a_scope.enter_async_context(client(b, secret))
            _, resp = await on_b.call("session/load", {"sessionId": held})
            assert resp["error"]["message"] == MSG_SESSION_ALREADY_ACTIVE.format(session_id=held)
            # Attaching on B names A's public_url; following it attaches on A.
            _, resp = await on_b.call("session/attach", {"sessionId": held})
            assert resp["error"]["code"] == SESSION_LIVE_ELSEWHERE, resp
            assert resp["error"]["data"]["acpgate"]["liveAt"]["url"] == a.url != b.url
            assert resp["error"]["data"]["acpgate"]["liveAt"]["instanceId"] == id_a
            async with connect(resp["error"]["data"]["acpgate"]["liveAt"]["url"], proxy=None,
                               additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
                seen, resp = await RawClient(ws).call("session/attach", {"sessionId": held})
                assert resp["result"]["historyPolicy"] == "full", resp
                assert replayed(seen, "user_message_chunk") == ["before the crash"]
            a.crash()
            crashed_at = time.monotonic()
            while True:  # A's liveness ended with it: no waiting for its lease
                seen, resp = await on_b.call("session/load", {"sessionId": held})
                if "result" in resp:
                    break
                assert resp["error"]["code"] == -32602, resp
                assert time.monotonic() - crashed_at < LEASE_SECS + 10, "never loadable on B"
                await asyncio.sleep(0.25)
            assert replayed(seen, "user_message_chunk") == ["before the crash"]
            res = await on_b.result("session/prompt", {"sessionId": held, "prompt": "after"})
            assert res["stopReason"] == "end_turn"

            # 3. Nobody touched the other's processes: B's leases are B's own, on B's
            # pids; A's wrappers and adapters ended by themselves (their parent died).
            b_leases = await b.leases()
            assert b_leases and all(le.gateway_instance_id == id_b for le in b_leases)
            assert not {le.root_pid for le in b_leases} & set(a_processes)
            assert await gone(a_processes, 30) == []
            await on_b.result("session/close", {"sessionId": held})
        b_processes = b.tree()
        # Every process B's lifecycle service ever set out to signal was one of B's leases'.
        b_lease_ids = {le.lease_id for le in await b.leases()}
        closes = [e for e in events(b.log) if e.get("event") in ("lease_close", "lease_stray_stop")]
        assert closes and all(e["lease_id"] in b_lease_ids for e in closes)
        assert not {pid for e in closes for pid in e.get("pids", [])} & set(a_processes)
    finally:
        for host in (a, b):
            if host.proc is not None and host.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(host.pid, signal.SIGCONT)
        await asyncio.gather(a.stop(), b.stop())
    assert b.proc is not None and b.proc.returncode == 0
    assert await gone(b_processes, 30) == []
