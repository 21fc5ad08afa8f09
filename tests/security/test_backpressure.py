"""A client that stops reading cannot grow the edge without bound.

The flood, against a real ``acpgate serve``: one WebSocket client stops
reading and sends 60,000 ``initialize`` requests. Every request has an answer
that must wait somewhere; the answers waiting behind the connection's full
queue are bounded (sends and bytes): past the bound the edge closes the
connection (1008 — or, as the client does not read the close frame either,
aborts it), stops reading its requests, and releases everything it held, its
session included. The figures (peak RSS) are ``python -m bench --only flood``'s; this test pins the
behaviour.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench.flood import drain, non_reading_client, send_flood
from services.edge.transport.outqueue import DEFAULT_QUEUE_MESSAGES, DEFAULT_WAITING_SENDS
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import WAIT, Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FLOOD = 60_000


async def settled(gw: Gateway, name: str, value: float) -> float:
    """``/metrics`` sample ``name`` once it reads ``value`` (or its last reading)."""
    for _ in range(int(WAIT * 10)):
        got = (await gw.metrics())[name]
        if got == value:
            return got
        await asyncio.sleep(0.1)
    return got


async def logged(gw: Gateway, event: str) -> list[dict[str, Any]]:
    """The log records of ``event`` once there is one (the edge logs a connection's close
    after it let go of it, so the test may look before the line is written)."""
    for _ in range(int(WAIT * 10)):
        found = [e for e in gw.events() if e.get("event") == event]
        if found:
            return found
        await asyncio.sleep(0.1)
    return []


async def test_a_flood_from_a_client_that_stopped_reading_is_cut_off(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("flood")
        async with non_reading_client(gw.url, token.secret) as ws:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "session/new",
                                      "params": {"agentAlias": "demo"}}))
            assert "result" in json.loads(await asyncio.wait_for(ws.recv(), WAIT))
            assert (await gw.metrics())["acpgate_active_sessions"] == 1
            sent = await send_flood(ws, FLOOD)
            drained = await drain(ws, expect=sent)
        # The edge hung up long before the client was through, and did not read on.
        assert sent < FLOOD
        assert drained.close_code in (1008, 1006), drained
        assert drained.messages < sent
        events = gw.events()
        (cut,) = [e for e in events if e.get("event") == "ws_slow_client"]
        # Cut off at the bound of what waits behind the full queue, not after a timeout.
        assert cut["why"] == "backlog" and cut["waiting"] == DEFAULT_WAITING_SENDS, cut
        assert cut["queued"] <= DEFAULT_QUEUE_MESSAGES
        (closed,) = await logged(gw, "ws_closed")
        assert closed["received"] < sent, closed  # it stopped reading the flood
        # Everything the connection held is released: the socket, the session.
        assert await settled(gw, "acpgate_ws_connections", 0) == 0
        assert await settled(gw, "acpgate_active_sessions", 0) == 0
        assert (await gw.metrics())["acpgate_ws_slow_client_closes_total"] == 1
        # And the edge serves the next client as before.
        other = RawClient(await gw.connect(await gw.token("next")))
        assert (await other.result("initialize", {}))["protocolVersion"] == 1
        await other.ws.close()
