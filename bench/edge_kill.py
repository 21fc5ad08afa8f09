"""``kill -9`` of one of ``acpgate serve``'s edge workers under streaming sessions.

A real serve with two edge workers, a streaming external agent
(``tests/security/scripted_agent.py``) and one WebSocket client per session, every one on
worker 2; while every turn streams, worker 2 is killed. serve restarts it, the new worker
re-adopts the sessions, and each client reconnects (``?worker=2``, again until served) and
attaches after the last event id it saw (:mod:`tests.chaos.edge_worker_kill`). Measured:
turns failed, chunks lost and duplicated across the re-attach, agents replaced, and the
seconds from the kill until each client's attach was answered (median, p99). Target: 0
turns failed, 0 chunks lost.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.sizes import Sizes
from bench.stats import Dist, Row
from tests.chaos.edge_worker_kill import kill_and_reattach, room, start_streams
from tests.gateway.workers_serve import serve_workers
from tests.security.scripted_agent import agent_section

__all__ = ["run_edge_kill"]


async def run_edge_kill(sizes: Sizes) -> list[Row]:
    """The rows of one kill (``sizes.edge_kill_sessions`` sessions)."""
    count = sizes.edge_kill_sessions
    with tempfile.TemporaryDirectory(prefix="acpb-") as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        gateway, acp = room(count)
        async with serve_workers(root, workers=2, detach_grace_secs=600, gateway=gateway,
                                 acp=acp, extra=agent_section("scripted")) as served:
            started = await start_streams(served, count, work, sizes.edge_kill_chunks)
            outcome, clients = await kill_and_reattach(served, started, sizes.edge_kill_chunks)
            for client in clients:
                await client.ws.close()
    item = f"kill -9 edge worker, {count} streaming sessions"
    note = f"{outcome.mid_turn} of {count} turns mid-stream at the kill"
    if outcome.errors:
        note += "; " + "; ".join(sorted(set(outcome.errors)))
    return [
        Row(item, "time to re-attach", "s", Dist.of(outcome.reattach_secs), "", None,
            note="from the kill to the attach's answer; " + note),
        Row(item, "turns failed", "", Dist.of([outcome.failed]), "", None, "0",
            outcome.failed == 0),
        Row(item, "chunks lost", "", Dist.of([outcome.lost]), "", None, "0", outcome.lost == 0),
        Row(item, "chunks duplicated", "", Dist.of([outcome.duplicated]), "", None, "0",
            outcome.duplicated == 0),
        Row(item, "agents replaced", "", Dist.of([outcome.agents_replaced]), "", None, "0",
            outcome.agents_replaced == 0),
    ]
