"""What an edge re-adopting a session reads of its event log to carry its running turn on.

A real session service (SQLite, on a unix socket) holds a session with a long history:
``readopt_turns`` turns of ``readopt_chunks`` relayed chunks each, the last one running,
written through the edge's own event log. Measured: the time to read what re-adoption
needs, as it did before (``ReadEvents`` of the whole log, the running turn picked out as
the last prompt's) and as it does now (``running_turn_only``: from the running turn's
prompt on), with the events each read; rounds interleaved.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from acpgate_contracts.session.v1 import session_pb2 as pb
from acpgate_contracts.session.v1 import session_pb2_grpc
from bench.sizes import Sizes
from bench.stats import Dist, Row
from services.common.config import AcpSection, AgentSection, Config, PathsSection
from services.edge.backends.session import SessionBackend
from services.edge.sessions.event_log import EventLog
from services.edge.sessions.feed import SessionFeed
from services.session.api.server import start_session_server

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as AsyncStub

__all__ = ["run_readopt_read"]

ROUNDS = 5
_SID = "long-history"


async def _fill(stub: AsyncStub, turns: int, chunks: int,
                workspace: Path) -> None:
    """The session: ``turns`` turns of ``chunks`` chunks, all ended but the last."""
    await stub.CreateSession(pb.CreateSessionRequest(
        session_id=_SID, agent_alias="alpha", workspace_dir=str(workspace)))
    log = EventLog(SessionBackend.of_stub(stub), lambda _sid: ("", 0), lambda _sid: None)
    await log.begin("bench-readopt", interrupt=False)
    feed = SessionFeed(_SID, max_chars=1 << 30, start_id=1000)
    try:
        for n in range(turns):
            turn = feed.reserve_id()
            log.turn(_SID, turn, "running")
            log.action(_SID, turn, turn, "prompt", b'{"params":{"update":{}}}')
            for start in range(0, chunks, 100):
                log.updates(_SID, turn, feed.stamp(
                    [{"sessionUpdate": "agent_message_chunk",
                      "content": {"type": "text", "text": f"turn {n} chunk {i} "}}
                     for i in range(start, min(chunks, start + 100))], None))
            if n < turns - 1:
                log.turn(_SID, turn, "completed")
            assert await log.flush()
    finally:
        await log.close()


async def _read(stub: AsyncStub, running_only: bool
                ) -> tuple[float, int]:
    """Seconds to read what re-adoption reads, and the events read."""
    began = time.perf_counter()
    count = 0
    async for page in stub.ReadEvents(
            pb.ReadEventsRequest(session_id=_SID, running_turn_only=running_only)):
        count += len(page.events)
    return time.perf_counter() - began, count


async def run_readopt_read(sizes: Sizes) -> list[Row]:
    """Whole log (before) against the running turn only (after)."""
    turns, chunks = sizes.readopt_turns, sizes.readopt_chunks
    with tempfile.TemporaryDirectory(prefix="acpb-") as tmp:
        root = Path(tmp)
        cfg = Config(config_dir=root / "cfg", acp=AcpSection(default_agent="alpha"),
                     paths=PathsSection(data_dir=str(root / "data")),
                     agents={"alpha": AgentSection(alias="alpha", provider="demo",
                                                   model="demo")})
        cfg.config_dir.mkdir(parents=True)
        running = await start_session_server(cfg, f"unix:{root}/s.sock")
        channel = running.dial()
        try:
            stub: AsyncStub = session_pb2_grpc.SessionServiceStub(channel)
            await _fill(stub, turns, chunks, root)
            whole: list[float] = []
            only: list[float] = []
            read_whole = read_only = 0
            for _ in range(ROUNDS):
                secs, read_whole = await _read(stub, False)
                whole.append(secs * 1000)
                secs, read_only = await _read(stub, True)
                only.append(secs * 1000)
        finally:
            await channel.close(None)
            await running.stop(grace=0.2)
    item = f"re-adoption's read, {turns} turns x {chunks} chunks (SQLite)"
    return [
        Row(item, "read time", "ms", Dist.of(only), "whole log", Dist.of(whole),
            note=f"events read: {read_only} (the whole log: {read_whole})"),
    ]
