"""Session slots for one person's day: shares by token count, room from detached sessions.

A real ``acpgate serve`` (built-in agent, fake model). With one token, the token
may use every ``max_sessions`` slot; once a second token exists they split them.
A token at its share (or at the host's limit) gets room from its own detached idle
sessions — the longest detached is released as the grace's end would, and stays
loadable — but a detached session running a turn keeps its slot. The -32001 that
remains names the token's sessions holding the slots, how to free one and the key
that raises the limit, in its message and in ``data.acpgate``. With several edge
workers, the detached session may live on another worker than the new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MSG_SESSION_LIMIT, MSG_SESSION_LIMIT_TOKEN, SESSION_LIMIT
from tests.gateway.attach_client import cut, kind, read_until
from tests.gateway.stack import RawClient
from tests.gateway.test_detach import active_sessions, until
from tests.gateway.workers_serve import client_on, serve_workers
from tests.gateway.workers_serve import until as worker_until
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def used_session(client: RawClient) -> str:
    """A new session the client used (so that a cut detaches it)."""
    sid = str((await client.result("session/new", {}))["sessionId"])
    assert "mine" in await client.say(sid, "mine")
    return sid


async def detached(gw: Gateway, count: int) -> None:
    """Wait until ``count`` sessions were detached."""
    async def check() -> bool:
        return sum(e.get("event") == "session_detached" for e in gw.events()) >= count
    await until(check, f"{count} sessions detached")


def released_for_room(gw: Gateway) -> list[str]:
    """The sessions released to make room, in order."""
    return [str(e["session_id"]) for e in gw.events()
            if e.get("event") == "session_detach_released_for_room"]


def refusal(resp: dict[str, Any]) -> dict[str, Any]:
    """The -32001 error of ``resp``."""
    error = resp.get("error")
    assert isinstance(error, dict) and error["code"] == SESSION_LIMIT, resp
    return error


async def test_one_token_uses_every_slot_and_two_tokens_split_them(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, max_sessions=4) as gw:
        a = RawClient(await gw.connect(await gw.token("a")))
        mine = [(await a.result("session/new", {}))["sessionId"] for _ in range(3)]
        # A second token: each now gets half of the slots; A holds more already, keeps them.
        b = RawClient(await gw.connect(await gw.token("b")))
        _, resp = await a.call("session/new", {})
        error = refusal(resp)
        assert error["message"].startswith(MSG_SESSION_LIMIT_TOKEN.format(max=2)), error
        message = error["message"]
        for sid in mine:
            assert sid in message, message
        for words in ("session/close", "session/resume", "session/attach",
                      "[acp] max_sessions_per_token"):
            assert words in message, message
        ours = error["data"]["acpgate"]
        assert ours["scope"] == "token" and ours["limit"] == 2 and ours["held"] == 3, ours
        assert ours["configKey"] == "acp.max_sessions_per_token", ours
        assert {s["sessionId"] for s in ours["sessions"]} == set(mine), ours
        assert not any(s["detached"] or s["busy"] for s in ours["sessions"]), ours
        assert ours["free"] == ["session/close", "session/resume", "session/attach"], ours
        # B gets its part; the host is then full: B is told so, and never of A's sessions.
        assert (await b.result("session/new", {}))["sessionId"]
        _, resp = await b.call("session/new", {})
        error = refusal(resp)
        assert error["message"].startswith(MSG_SESSION_LIMIT.format(max=4)), error
        assert "[acp] max_sessions" in error["message"], error
        assert not any(sid in str(error) for sid in mine), error
        await a.ws.close()
        await b.ws.close()


async def test_a_detached_idle_session_makes_room_and_stays_loadable(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, max_sessions=2) as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sids = [await used_session(first) for _ in range(2)]
        cut(first.ws)
        await detached(gw, 2)

        again = RawClient(await gw.connect(token))
        assert (await again.result("session/new", {}))["sessionId"]
        assert released_for_room(gw) == [sids[0]]  # the longest detached went
        assert await active_sessions(gw) == 2
        # Released as the grace's end releases: loaded from the store like any (the other
        # detached idle session makes room for it in turn).
        seen, resp = await again.call("session/load", {"sessionId": sids[0]})
        assert "result" in resp, resp
        assert any("mine" in str(m) for m in seen if kind(m) == "agent_message_chunk")
        assert released_for_room(gw) == sids
        await again.ws.close()


async def test_a_detached_session_running_a_turn_keeps_its_slot(tmp_path: Path) -> None:
    go = tmp_path / "go"
    async with running_gateway(tmp_path, max_sessions=1) as gw:
        token = await gw.token("laptop")
        first = RawClient(await gw.connect(token))
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt":
                                            f"shell while [ ! -e {go} ]; do sleep 0.05; done"})
        await read_until(first.ws, lambda m: kind(m) == "tool_call")
        cut(first.ws)
        await detached(gw, 1)

        again = RawClient(await gw.connect(token))
        _, resp = await again.call("session/new", {})
        error = refusal(resp)
        assert sid in error["message"] and "running a turn" in error["message"], error
        assert error["data"]["acpgate"]["sessions"] == [
            {"sessionId": sid, "detached": True, "busy": True}], error
        assert released_for_room(gw) == []
        go.touch()  # the turn ends: the session waits idle, and may go for room now

        async def opened() -> bool:
            _, resp = await again.call("session/new", {})
            return "result" in resp
        await until(opened, "a new session once the detached one went idle")
        assert released_for_room(gw) == [sid]
        await again.ws.close()


async def test_a_detached_idle_session_on_another_worker_makes_room(tmp_path: Path) -> None:
    """With edge workers the session service counts the share: a token at it on worker 2
    gets room from its detached idle session on worker 1, which releases it."""
    async with serve_workers(tmp_path, detach_grace_secs=600,
                             env={"ACPGATE_acp__max_sessions_per_token": "2"}) as served:
        first = await client_on(served, 1)
        assert first is not None
        sids = [await used_session(first) for _ in range(2)]
        cut(first.ws)

        def events(name: str) -> list[str]:
            return [str(e.get("session_id")) for e in served.events() if e.get("event") == name]

        async def both_detached() -> bool:
            return len(events("session_detached")) == 2
        await worker_until(both_detached, "both sessions detached on worker 1")
        second = await client_on(served, 2)
        assert second is not None
        assert (await second.result("session/new", {}))["sessionId"]
        assert events("session_detach_released_for_room") == [sids[0]]
        await second.ws.close()
