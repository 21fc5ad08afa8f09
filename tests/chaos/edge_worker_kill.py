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
from typing import Any

from websockets.exceptions import ConnectionClosed

from tests.chaos.lifecycle_kill import alive
from tests.gateway.stack import RawClient
from tests.gateway.workers_serve import Served, dial

CHUNKS = 60
WAIT = 60.0


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
