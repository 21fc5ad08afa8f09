"""Replay after an event id the in-memory ring no longer holds reads the session's log.

A real ``acpgate serve`` with a tiny replay ring (``[gateway] replay_chars``) and a scripted
streaming external agent. A client that comes back with an event id the ring lost gets
what lies between from the store, then the ring, then the live turn: every event id once,
in order, none left out — ``session/attach`` ``after_message`` (another client, mid-turn),
``session/resume`` after a cut, and the v2 ``replayFrom`` cursor of a session no longer
live.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.gateway.attach_client import (
    Message,
    cut,
    event_ids,
    initialize,
    is_turn_end,
    kind,
    read_until,
)
from tests.gateway.stack import RawClient
from tests.gateway.test_v2_gateway import INIT_V2, V2Socket
from tests.security.gateway_stack import Gateway, Token, running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: A ring that holds a few chunk updates only.
TINY_RING = "replay_chars = 1000\ndetach_grace_secs = 120\n"


async def _client(gw: Gateway, token: Token, name: str) -> RawClient:
    raw = RawClient(await gw.connect(token))
    await raw.result("initialize", initialize(name))
    return raw


def _chunks(msgs: list[Message]) -> list[str]:
    return [str(m["params"]["update"]["content"]["text"]) for m in msgs
            if kind(m) == "agent_message_chunk"]


def _chunk_ids(msgs: list[Message]) -> list[int]:
    return event_ids([m for m in msgs if kind(m) == "agent_message_chunk"])


def _is_chunk(n: int) -> object:
    return lambda m: kind(m) == "agent_message_chunk" and \
        m["params"]["update"]["content"]["text"] == f"chunk {n} "


async def test_attach_after_an_event_the_ring_lost_reads_the_log_then_goes_live(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway=TINY_RING,
                               extra=agent_section("scripted")) as gw:
        token = await gw.token("laptop")
        owner = await _client(gw, token, "laptop")
        sid = (await owner.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        prompt = await owner.send("session/prompt", {"sessionId": sid, "prompt": "stream 60"})
        had = await read_until(owner.ws, _is_chunk(30))  # the first chunks left the ring
        point = _chunk_ids(had)[2]

        phone = await _client(gw, token, "phone")
        seen, resp = await phone.call("session/attach", {
            "sessionId": sid, "role": "observer", "historyPolicy": "after_message",
            "afterMessageId": point})
        assert resp["result"]["historyPolicy"] == "after_message", resp
        if not any(is_turn_end(m) for m in seen):
            seen += await read_until(phone.ws, is_turn_end)
        rest = await owner.until_response(prompt)
        owner_ids = _chunk_ids(had + rest[0])
        ids = event_ids(seen)
        assert ids == sorted(set(ids)), "each event once, in order"
        assert _chunk_ids(seen) == [i for i in owner_ids if i > point], "none left out"
        assert _chunks(seen) == [f"chunk {i} " for i in range(3, 60)]
        await phone.ws.close()
        await owner.ws.close()


async def test_resume_after_a_cut_reads_what_the_ring_lost_from_the_log(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway=TINY_RING,
                               extra=agent_section("scripted")) as gw:
        token = await gw.token("laptop")
        first = await _client(gw, token, "laptop")
        sid = (await first.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": "stream 60"})
        before = await read_until(first.ws, _is_chunk(9))
        cut(first.ws)  # mid-turn; the agent streams on into the ring and the log
        watcher = await _client(gw, token, "watch")  # sees the turn go on meanwhile
        await watcher.result("session/attach", {"sessionId": sid, "role": "observer",
                                                "historyPolicy": "none"})
        await read_until(watcher.ws, _is_chunk(40))

        again = await _client(gw, token, "laptop")
        seen, resp = await again.call("session/resume", {
            "sessionId": sid, "_meta": {"acpgate": {"afterEventId": event_ids(before)[-1]}}})
        assert "result" in resp, resp
        if not any(is_turn_end(m) for m in seen):
            seen += await read_until(again.ws, is_turn_end)
        assert _chunks(before) + _chunks(seen) == [f"chunk {i} " for i in range(60)]
        ids = event_ids(before) + event_ids(seen)
        assert ids == sorted(set(ids)), "each event once, in order"
        await again.ws.close()
        await watcher.ws.close()


async def test_v2_event_cursor_of_a_session_no_longer_live_reads_the_log(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        first = V2Socket(await gw.connect(token))
        await first.call("initialize", INIT_V2)
        _, new = await first.call("session/new", {})
        sid = new["sessionId"]
        await first.call("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "first turn"}]})
        turn = await first.until(lambda m: kind(m) == "state_update"
                                 and m["params"]["update"]["state"] == "idle")
        numbered = event_ids(turn)
        await first.call("session/close", {"sessionId": sid})  # no longer live anywhere
        await first.ws.close()

        again = V2Socket(await gw.connect(token))
        await again.call("initialize", INIT_V2)
        cursor = numbered[len(numbered) // 2]
        replayed, resumed = await again.call("session/resume", {
            "sessionId": sid, "cwd": "/", "replayFrom": {"type": "_acpgate_event",
                                                       "eventId": cursor}})
        assert resumed["_meta"]["acpgate"]["replay"] == "events"
        assert [kind(m) for m in replayed][-2:] == ["replay_complete", "state_update"]
        ids = [i for i in event_ids(replayed) if i in numbered]
        assert ids == [i for i in numbered if i >= cursor], "from the cursor on, exactly"
        assert min(event_ids(replayed)) >= cursor, "nothing before the cursor"
        await asyncio.wait_for(again.ws.close(), 10)
