"""A ``kill -9`` of the lifecycle service under streaming sessions loses nothing.

A real ``acpgate serve`` with a streaming external agent and WebSocket clients: while
every turn streams, serve's lifecycle child is killed. serve restarts it, the new one
re-adopts the wrappers within their adoption window, and the edge goes on — over the
adapters' pipes it holds, or (``data_path = "grpc"``) over a re-opened ``Attach``
stream. Every turn ends with all its chunks in order, no agent's PID changed, and after
serve stops no agent is left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.lifecycle_kill import agents, alive, finish_turns, kill_lifecycle, start_turns
from tests.security.gateway_stack import WAIT, running_gateway
from tests.security.procs import eventually
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SESSIONS = 6
CHUNKS = 40


@pytest.mark.parametrize("data_path", ["auto", "grpc"])
async def test_kill9_of_the_lifecycle_service_fails_no_turn(tmp_path: Path, data_path: str) -> None:
    extra = agent_section("scripted") + f'\n[services]\ndata_path = "{data_path}"\n'
    async with running_gateway(tmp_path, extra=extra, max_sessions=SESSIONS + 2,
                               per_token=SESSIONS + 2) as gw:
        started = await start_turns(gw, SESSIONS, CHUNKS, "scripted")
        before = agents(gw)
        assert len(before) == SESSIONS
        await kill_lifecycle(gw)
        turns = await finish_turns(started)
        for turn in turns:
            assert turn.response.get("result", {}).get("stopReason") == "end_turn", turn.response
            assert turn.chunks == [f"chunk {i} " for i in range(CHUNKS)], turn.session_id
        assert agents(gw) == before, "no agent died or was replaced"
        assert any(e.get("event") == "wrappers_adopted" and e.get("adopted") == SESSIONS
                   for e in gw.events())
        pids = list(before.values())
    # serve stopped: what it re-adopted was stopped with it.
    await eventually(lambda: not alive(pids), WAIT, "every agent to be gone")
