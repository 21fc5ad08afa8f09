"""``kill -9`` of ``acpgate serve``'s lifecycle service under streaming sessions.

A real serve with a streaming external agent (``tests/security/scripted_agent.py``) and one
WebSocket client per session; while every turn streams, the lifecycle child is killed.
Measured: turns failed, agents that died or were replaced, chunks lost, and the seconds
from the kill until the restarted service's health check says SERVING (it re-adopted the
wrappers and reaped what was dead by then). Target: 0, 0, 0 and ≤ 2 s.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.sizes import Sizes
from bench.stats import Dist, Row
from tests.chaos.lifecycle_kill import agents, finish_turns, kill_lifecycle, start_turns
from tests.security.gateway_stack import running_gateway
from tests.security.scripted_agent import agent_section

CHUNKS = 80


async def run_lifecycle_kill(sizes: Sizes) -> list[Row]:
    """The rows of one kill (``sizes.kill_sessions`` sessions)."""
    count = sizes.kill_sessions
    with tempfile.TemporaryDirectory(prefix="acpb-") as tmp:
        room = count + 4
        gateway = f"max_connections = {room}\nmax_connections_per_token = {room}\n"
        async with running_gateway(Path(tmp), extra=agent_section("scripted"), gateway=gateway,
                                   max_sessions=room, per_token=room) as gw:
            started = await start_turns(gw, count, CHUNKS, "scripted")
            before = agents(gw)
            _, secs = await kill_lifecycle(gw)
            turns = await finish_turns(started)
            after = agents(gw)
    failed = sum(t.response.get("result", {}).get("stopReason") != "end_turn" for t in turns)
    lost = sum(CHUNKS - len(set(t.chunks)) for t in turns)
    died = sum(after.get(lease) != pid for lease, pid in before.items())
    item = f"kill -9 lifecycle, {count} streaming sessions"
    return [
        Row(item, "serving again after", "s", Dist.of([secs]), "", None, "≤ 2 s", secs <= 2.0),
        Row(item, "turns failed", "", Dist.of([failed]), "", None, "0", failed == 0),
        Row(item, "agents died", "", Dist.of([died]), "", None, "0", died == 0),
        Row(item, "chunks lost", "", Dist.of([lost]), "", None, "0", lost == 0),
    ]
