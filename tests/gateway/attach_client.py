"""Helpers of the live-session tests: reading a session's numbered updates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection

from tests.security.gateway_stack import WAIT

Message = dict[str, Any]

#: A prompt whose tool waits for the file ``{go}``, then whose answer comes in 60 chunks.
WAITS_THEN_STREAMS = "shell while [ ! -e {go} ]; do sleep 0.05; done; echo STREAM 60"


async def read_until(ws: ClientConnection, done: Callable[[Message], bool]) -> list[Message]:
    """Every message until (and with) the first that ``done`` accepts."""
    seen: list[Message] = []
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        seen.append(msg)
        if done(msg):
            return seen


def kind(msg: Message) -> str:
    """The ``sessionUpdate`` of a session/update notification, else ""."""
    if msg.get("method") != "session/update":
        return ""
    return str(msg["params"]["update"].get("sessionUpdate", ""))


def event_id(msg: Message) -> int | None:
    """A session/update's ``_meta.acpgate.eventId``."""
    if msg.get("method") != "session/update":
        return None
    value = (msg["params"]["update"].get("_meta") or {}).get("acpgate", {}).get("eventId")
    return value if isinstance(value, int) else None


def event_ids(msgs: list[Message]) -> list[int]:
    """The event ids of ``msgs``' updates, in order."""
    return [i for m in msgs if (i := event_id(m)) is not None]


def text_of(msgs: list[Message]) -> str:
    """The assistant text the ``agent_message_chunk`` updates of ``msgs`` carry."""
    return "".join(str(m["params"]["update"]["content"].get("text", "")) for m in msgs
                   if kind(m) == "agent_message_chunk")


def is_turn_end(msg: Message) -> bool:
    """A ``turn_complete`` update."""
    return kind(msg) == "turn_complete"


def cut(ws: ClientConnection) -> None:
    """Drop the connection as a lost network does: no close frame."""
    ws.transport.abort()


def initialize(name: str) -> dict[str, Any]:
    """``initialize`` params naming the client ``name``."""
    return {"protocolVersion": 1, "clientCapabilities": {},
            "clientInfo": {"name": name, "version": "1.0"}}
