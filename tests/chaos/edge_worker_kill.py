"""Killing one of a real ``acpgate serve``'s edge workers under streaming sessions.

Shared by the chaos tests (which assert nothing is lost) and ``make bench`` (which also
reports how long the clients took to re-attach): what one client saw of its session, and
how it reads, drains and re-attaches with ``after_message``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.chaos.lifecycle_kill import alive
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import Served, client_on, dial, kill_worker

CHUNKS = 60
WAIT = 60.0
#: The worker the sessions run on, and that is killed.
KILLED = 2
#: Between a re-attaching client's tries while its worker is not back.
RETRY_SECS = 0.05


class Stream:
    """What one client saw of its session: the chunks and the newest event id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.chunks: list[str] = []
        self.last_event = 0
        self.completed: dict[str, Any] | None = None

    def see(self, msg: dict[str, Any]) -> None:
        if msg.get("method") != "session/update":
            return
        update = msg["params"]["update"]
        event = update.get("_meta", {}).get("acpgate", {}).get("eventId")
        if isinstance(event, int):
            self.last_event = max(self.last_event, event)
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            self.chunks.append(update["content"]["text"])
        elif kind == "turn_complete":
            self.completed = update


def agent_pids(served: Served) -> dict[str, int]:
    """Lease id → adapter PID of every open lease."""
    db = sqlite3.connect(served.cfg.data_dir / "lifecycle" / "leases.db")
    try:
        rows = db.execute("SELECT lease_id, adapter_pid FROM leases WHERE state = 'open'").fetchall()
    finally:
        db.close()
    return {lease: pid for lease, pid in rows if alive([pid])}


async def read_until(client: RawClient, stream: Stream, enough: int) -> None:
    """Read ``client``'s messages until ``stream`` holds ``enough`` chunks."""
    while len(stream.chunks) < enough:
        stream.see(json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)))


async def drain_until_closed(client: RawClient, stream: Stream) -> None:
    """Read what the killed worker still sent, until the connection is gone."""
    with contextlib.suppress(ConnectionClosed, TimeoutError):
        while True:
            stream.see(json.loads(await asyncio.wait_for(client.ws.recv(), WAIT)))


async def reattach(served: Served, stream: Stream) -> RawClient:
    """Reconnect to worker 2 and attach after the last event id seen; read until the turn
    completes."""
    client = RawClient(await dial(served, query="worker=2"))
    await client.result("initialize", {"protocolVersion": 1})
    req = await client.send("session/attach", {
        "sessionId": stream.session_id, "role": "controller",
        "historyPolicy": "after_message", "afterMessageId": stream.last_event})
    while stream.completed is None:
        msg = json.loads(await asyncio.wait_for(client.ws.recv(), WAIT))
        if msg.get("id") == req and "method" not in msg:
            assert "result" in msg, msg
            assert msg["result"]["historyPolicy"] == "after_message", msg
            continue
        stream.see(msg)
    return client


def room(sessions: int) -> tuple[str, str]:
    """The ``[gateway]`` and ``[acp]`` lines that let one token hold ``sessions`` sessions
    and their connections (twice over: the re-attaching clients come while the old
    connections may still count)."""
    need = 2 * sessions + 4  # the test config's max_connections is 64: 30 sessions at most
    return (f"max_connections_per_token = {need}\n",
            f"max_sessions = {need}\nmax_sessions_per_token = {need}\n")


async def start_streams(served: Served, count: int, work: Path,
                        chunks: int = CHUNKS) -> list[tuple[RawClient, Stream]]:
    """``count`` clients on worker :data:`KILLED`, each with a session of the scripted
    agent streaming ``chunks`` chunks; returns once each has had a few."""
    started: list[tuple[RawClient, Stream]] = []
    for _ in range(count):
        client = await client_on(served, KILLED)
        assert client is not None, "worker 2 refused a connection"
        sid = (await client.result("session/new", {"cwd": str(work),
                                                   "agentAlias": "scripted"}))["sessionId"]
        started.append((client, Stream(sid)))
    for client, stream in started:  # every turn starts at once: the kill comes mid-turn
        await client.send("session/prompt", {"sessionId": stream.session_id,
                                             "prompt": f"stream {chunks}"})
    await asyncio.gather(*(read_until(c, s, 5) for c, s in started))
    return started


async def reattach_when_up(served: Served, stream: Stream, began: float
                           ) -> tuple[RawClient, float]:
    """What a client does after its worker died: reconnect (``?worker=2``) and attach after
    the last event id seen, again until it is served; read until the turn completes. The
    client, and the seconds from ``began`` (the kill) until the attach was answered."""
    while True:
        if time.monotonic() - began > WAIT:
            raise TimeoutError(f"{stream.session_id} never re-attached")
        try:
            client = RawClient(await dial(served, query=f"worker={KILLED}"))
        except (InvalidStatus, OSError, TimeoutError):
            await asyncio.sleep(RETRY_SECS)
            continue
        answered = 0.0
        try:
            await client.result("initialize", {"protocolVersion": 1})
            req = await client.send("session/attach", {
                "sessionId": stream.session_id, "role": "controller",
                "historyPolicy": "after_message", "afterMessageId": stream.last_event})
            while stream.completed is None:
                msg = json.loads(await asyncio.wait_for(client.ws.recv(), WAIT))
                if msg.get("id") == req and "method" not in msg:
                    assert "result" in msg, msg
                    assert msg["result"]["historyPolicy"] == "after_message", msg
                    answered = time.monotonic() - began
                    continue
                stream.see(msg)
            return client, answered
        except (ConnectionClosed, AssertionError) as exc:
            if answered:  # served, then cut or refused: no second chance
                raise RuntimeError(f"{stream.session_id}: lost after re-attaching") from exc
            await client.ws.close()
            await asyncio.sleep(RETRY_SECS)


@dataclass
class KillOutcome:
    """What a kill of worker :data:`KILLED` did to its sessions."""

    sessions: int
    #: Turns that did not complete with ``end_turn`` (or whose client never re-attached).
    failed: int = 0
    #: Chunks never seen, and seen more than once, over every session.
    lost: int = 0
    duplicated: int = 0
    #: Agents whose process died or was replaced.
    agents_replaced: int = 0
    #: Sessions whose turn was still streaming when the killed worker's connection closed.
    mid_turn: int = 0
    #: Seconds from the kill until each client's attach was answered.
    reattach_secs: list[float] = field(default_factory=list)
    #: Why each failed session's client did not get its turn back.
    errors: list[str] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of :attr:`reattach_secs` (0 without any)."""
        data = sorted(self.reattach_secs)
        if not data:
            return 0.0
        if len(data) == 1:
            return data[0]
        return statistics.quantiles(data, n=100, method="inclusive")[min(98, int(q * 100) - 1)]


async def kill_and_reattach(served: Served, started: list[tuple[RawClient, Stream]],
                            chunks: int = CHUNKS) -> tuple[KillOutcome, list[RawClient]]:
    """``kill -9`` worker :data:`KILLED` under ``started``'s streams, every client
    re-attaching as soon as it can; the outcome and the clients that re-attached."""
    before = agent_pids(served)
    began = time.monotonic()
    kill_worker(served, KILLED)
    await asyncio.gather(*(drain_until_closed(c, s) for c, s in started))
    outcome = KillOutcome(len(started))
    outcome.mid_turn = sum(len(s.chunks) < chunks for _, s in started)
    done = await asyncio.gather(*(reattach_when_up(served, s, began) for _, s in started),
                                return_exceptions=True)
    clients = []
    for (_, stream), result in zip(started, done, strict=True):
        if isinstance(result, BaseException):
            outcome.failed += 1
            cause = result.__cause__
            outcome.errors.append(f"{type(result).__name__}: {result}"
                                  + (f" ({type(cause).__name__}: {cause})" if cause else ""))
        else:
            clients.append(result[0])
            outcome.reattach_secs.append(result[1])
            if stream.completed is None or stream.completed.get("stopReason") != "end_turn":
                outcome.failed += 1
        seen = set(stream.chunks)
        outcome.lost += len({f"chunk {i} " for i in range(chunks)} - seen)
        outcome.duplicated += len(stream.chunks) - len(seen)
    after = agent_pids(served)
    outcome.agents_replaced = sum(after.get(lease) != pid for lease, pid in before.items())
    return outcome, clients
