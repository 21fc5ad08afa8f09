"""``acpgate serve`` runs ``[gateway] workers`` edge processes on one port.

Real processes: each worker inherits serve's listening socket and serves its own
connections (which one accepts is made the test's choice by stopping the others,
tests/gateway/workers_serve.py). Across the workers: ``/metrics`` and ``/healthz``
answer for the host, a session belongs to the worker that created it (a load on
another gets "Session already active", never a second adapter), ``acpgate ps`` shows
every worker's sessions, the logs name the worker, warm pools are declared once,
and a revoked token loses its connections on every worker.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from acpgate.ops.ps import gather
from services.common.attach_protocol import MSG_ATTACH_ON_SIBLING_WORKER
from services.common.protocol import (
    INVALID_PARAMS,
    MSG_SESSION_ALREADY_ACTIVE,
    MSG_SESSION_ON_SIBLING_WORKER,
    SESSION_LIVE_ELSEWHERE,
)
from services.edge.tokens import TokenStore, token_db_path

from .workers_serve import client_on, on_worker, serve_workers, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_two_workers_answer_for_the_host(tmp_path: Path) -> None:
    # A share above the three sessions the token holds at most here.
    async with serve_workers(tmp_path, env={"ACPGATE_acp__max_sessions_per_token": "8"}) as served:
        assert set(served.workers()) == {1, 2}
        started = [e["child"] for e in served.events() if e.get("event") == "child_started"]
        assert started == ["session", "lifecycle", "edge-1", "edge-2"]
        assert [e["workers"] for e in served.events() if e.get("event") == "serve_edge_workers"] == [2]
        assert (await served.health())["workers"] == 2

        on_1, on_2 = await client_on(served, 1), await client_on(served, 2)
        assert on_1 is not None and on_2 is not None
        sid_1 = (await on_1.result("session/new", {}))["sessionId"]
        sid_2 = (await on_2.result("session/new", {}))["sessionId"]

        # /metrics on either worker counts the sessions of both.
        # (Between two looks both run, so that the one stopped meanwhile reports.)
        for number in (1, 2):
            async def both_counted() -> bool:
                with on_worker(served, number):  # noqa: B023 (called within the loop turn)
                    return (await served.metric("acpgate_active_sessions") == 2
                            and await served.metric("acpgate_ws_connections") == 2)
            await until(both_counted, f"worker {number}'s /metrics counting both")

        # A session is its creator's: a load through the other worker is refused.
        _, resp = await on_2.call("session/load", {"sessionId": sid_1})
        assert resp["error"]["code"] == INVALID_PARAMS
        # ... naming the worker that serves it, and how to reach it.
        assert resp["error"]["message"] == MSG_SESSION_ALREADY_ACTIVE.format(
            session_id=sid_1) + MSG_SESSION_ON_SIBLING_WORKER.format(worker=1)
        assert {k: v for k, v in resp["error"]["data"]["acpgate"]["liveAt"].items()
                if k in ("worker", "query")} == {"worker": 1, "query": "worker=1"}
        # session/attach through the other worker: -32007 naming the worker (the
        # answer for a session live elsewhere, here a sibling worker of the same host).
        _, resp = await on_2.call("session/attach", {"sessionId": sid_1, "role": "observer",
                                                     "historyPolicy": "none"})
        assert resp["error"]["code"] == SESSION_LIVE_ELSEWHERE, resp
        assert resp["error"]["message"] == MSG_ATTACH_ON_SIBLING_WORKER.format(
            session_id=sid_1, worker=1)
        assert resp["error"]["data"]["acpgate"]["liveAt"]["query"] == "worker=1"
        res = await on_1.result("session/prompt", {"sessionId": sid_1, "prompt": "!echo mine"})
        assert res["stopReason"] == "end_turn"

        # acpgate ps: every worker's sessions, each with its worker.
        report = await gather(served.cfg, with_leases=True)
        target = f"serve[{served.proc.pid}]"
        served_by = {s.session_id: s.served_by for s in report.sessions}
        assert served_by == {sid_1: f"{target} (edge worker 1)", sid_2: f"{target} (edge worker 2)"}
        # The warm pool of each built-in agent was declared by both workers, and kept once.
        warm = [lease for lease in report.leases if lease.state == "warm"]
        assert len(warm) <= 2  # one per agent (assistant, helper), none doubled
        assert not [e for e in served.events() if e.get("event") == "warm_pool_replaced"]

        # The logs name the worker.
        opened = {e.get("process") for e in served.events() if e.get("event") == "ws_open"}
        assert opened == {"edge-1", "edge-2"}


async def test_a_revoked_token_loses_its_connections_on_every_worker(tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        clients = [await client_on(served, 1), await client_on(served, 2)]
        TokenStore(token_db_path(served.cfg)).revoke(served.token_id)
        for client in clients:
            assert client is not None
            with pytest.raises(ConnectionClosed) as info:
                while True:
                    await asyncio.wait_for(client.ws.recv(), 60)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1008
