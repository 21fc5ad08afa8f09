"""A v2 ``session/resume`` ends with ``replay_complete`` and the current state only after
what the session streamed while the replay was being written.

A real edge runtime (embedded services) and the v2 test agent as a real child process. A v2
client starts a streaming turn and goes away mid-turn (its session detached); a second v2
client resumes by acpgate's event cursor and takes the replay slowly: its first replayed
line is only taken once the turn has ended. The turn's last chunks and its end (an idle
``state_update`` with the stop reason) were streamed meanwhile; they reach the client
before ``replay_complete`` and the idle current state, and nothing of the turn after them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from acpgate import __version__
from acpgate.embedded import start_embedded
from services.common.config import load_config
from services.edge.transport.connection import (
    LOCAL_OPERATOR,
    EdgeRuntime,
    open_runtime,
    serve_connection,
)
from tests.e2e.harness import write_config
from tests.launches import config_environ
from tests.v2_agent import agent_section
from tests.v2schema import check_sent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

INIT_V2 = {"protocolVersion": 2, "info": {"name": "v2-resume-order", "version": "1"}}
CHUNKS = 30
WAIT = 60.0


class V2Client:
    """One in-process remote connection speaking v2: push requests, await answers by id;
    ``hold`` (when set) is awaited before the next ``session/update`` is taken."""

    def __init__(self, runtime: EdgeRuntime) -> None:
        self._in: asyncio.Queue[str | None] = asyncio.Queue()
        self.out: list[dict[str, Any]] = []
        self._waiters: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._next = 0
        self.hold: asyncio.Event | None = None
        self.arrived = asyncio.Event()
        self._grew = asyncio.Event()
        self.task = asyncio.create_task(serve_connection(
            runtime, self._incoming(), self._send, caller=LOCAL_OPERATOR, remote=True))

    async def _incoming(self) -> AsyncIterator[str]:
        while (item := await self._in.get()) is not None:
            yield item

    async def _send(self, line: str) -> None:
        msg = json.loads(line)
        if msg.get("method") == "session/update" and self.hold is not None:
            self.arrived.set()
            await self.hold.wait()  # a client slow to take what it is sent
        if "method" in msg:
            check_sent(msg, None)
        self.out.append(msg)
        self._grew.set()
        fut = self._waiters.pop(msg.get("id"), None) if "method" not in msg else None
        if fut is not None:
            fut.set_result(msg)

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        self._in.put_nowait(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                        "params": params}))
        answer = await asyncio.wait_for(fut, WAIT)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def chunks_seen(self, count: int) -> None:
        """Wait until ``count`` message chunks arrived."""
        while len(_chunks(self.updates())) < count:
            self._grew.clear()
            await asyncio.wait_for(self._grew.wait(), WAIT)

    def updates(self) -> list[dict[str, Any]]:
        return [m["params"]["update"] for m in self.out if m.get("method") == "session/update"]

    async def close(self) -> None:
        self._in.put_nowait(None)
        await asyncio.wait_for(self.task, WAIT)


def _chunks(updates: list[dict[str, Any]]) -> list[str]:
    return [u["content"]["text"] for u in updates
            if u.get("sessionUpdate") == "agent_message_chunk"]


async def test_resume_ends_after_what_the_session_streamed_during_the_replay(
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    cfg_dir = write_config(tmp_path / "cfg", default_agent="two", extra=(
        agent_section("two", str(tmp_path / "agent.log"), "v2", "2")
        + "\n[gateway]\ndetach_grace_secs = 120\n"))
    rt = await open_runtime(load_config(Path(cfg_dir), environ=config_environ()),
                            version=__version__, start_services=start_embedded)
    try:
        first = V2Client(rt)
        await first.call("initialize", INIT_V2)
        sid = (await first.call("session/new", {"cwd": str(work), "mcpServers": []})
               )["sessionId"]
        await first.call("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": f"stream {CHUNKS}"}]})
        await first.chunks_seen(3)
        await first.close()  # mid-turn: the session is detached, its turn runs on
        session = rt.registry.active[sid]
        turn = session.turn
        assert turn is not None, "mid-turn"
        # From the first chunk on: the replay has lines to write, and the client is slow.
        cursor = next(u["_meta"]["acpgate"]["eventId"] for u in first.updates()
                      if u["sessionUpdate"] == "agent_message_chunk")

        again = V2Client(rt)
        await again.call("initialize", INIT_V2)
        again.hold = asyncio.Event()
        resuming = asyncio.ensure_future(again.call("session/resume", {
            "sessionId": sid, "cwd": str(work), "mcpServers": [],
            "replayFrom": {"type": "_acpgate_event", "eventId": cursor}}))
        # The replay is being written when the turn ends: its end is streamed meanwhile.
        await asyncio.wait_for(again.arrived.wait(), WAIT)
        await asyncio.wait_for(turn.done.wait(), WAIT)
        again.hold.set()
        result = await resuming

        got = again.updates()
        kinds = [u["sessionUpdate"] for u in got]
        assert kinds[-2:] == ["replay_complete", "state_update"], kinds
        assert got[-1]["state"] == "idle" and "stopReason" not in got[-1], got[-1]
        ends = [u for u in got if u["sessionUpdate"] == "state_update"
                and u.get("state") == "idle"]
        assert ends[0].get("stopReason") == "end_turn", ends
        assert _chunks(got) == [f"chunk {i} " for i in range(CHUNKS)]
        assert result["_meta"]["acpgate"]["replay"] == "events", result
        await again.close()
    finally:
        await rt.close()
