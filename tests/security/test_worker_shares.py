"""From the attacker's side: a token spreading its connections and sessions
over every edge worker of one ``acpgate serve`` gets no more than its shares.

Each worker alone would admit the token's whole share (were the limits kept in one
edge's memory); the session service counts every worker's together. A worker
killed with SIGKILL keeps nothing: its restarted successor's first report replaces
what it held, long before the lease time (set far above the test's waits here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.protocol import MSG_SESSION_LIMIT_TOKEN, SESSION_LIMIT
from tests.gateway.workers_serve import client_on, kill_worker, serve_workers, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_a_token_on_every_worker_stays_within_its_shares(tmp_path: Path) -> None:
    async with serve_workers(tmp_path, gateway="max_connections_per_token = 2\n",
                             extra="\n[store]\nlease_secs = 300\n",
                             env={"ACPGATE_acp__max_sessions_per_token": "2"}) as served:
        first = await client_on(served, 1)
        second = await client_on(served, 1)
        assert first is not None and second is not None  # the token's two, both on worker 1
        # Worker 2 holds none of the token's connections: a third lands there, refused.
        assert await client_on(served, 2) is None
        for _ in range(2):
            await first.result("session/new", {})
        await second.ws.close()  # a connection slot free again, for worker 2 to take

        async def third_admitted() -> bool:
            nonlocal third
            third = await client_on(served, 2)
            return third is not None
        third = None
        await until(third_admitted, "the freed connection slot taken on worker 2")
        assert third is not None
        # Its two sessions run on worker 1: none more on worker 2.
        _, resp = await third.call("session/new", {})
        assert resp["error"]["code"] == SESSION_LIMIT
        assert resp["error"]["message"].startswith(MSG_SESSION_LIMIT_TOKEN.format(max=2))

        # Worker 1 killed outright: restarted, it holds nothing, and says so at once.
        killed = kill_worker(served, 1)

        async def restarted() -> bool:
            now = served.workers()  # one look: the killed one may still be listed, then gone
            return 1 in now and now[1].pid != killed
        await until(restarted, "worker 1 restarted", tries=1200)

        async def session_on_worker_2() -> bool:
            _, resp = await third.call("session/new", {})
            return "result" in resp
        await until(session_on_worker_2, "worker 1's slots freed by its successor", tries=400)
