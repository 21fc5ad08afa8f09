"""Detached sessions from the attacker's side.

A real ``acpgate serve`` with the default ``[gateway] detach_grace_secs`` (600):

- another token's ``session/load``/``resume`` of a detached session is answered
  exactly like one of a session that does not exist — it never attaches it;
- a client cannot park agents by disconnecting: a session whose setup it cut,
  or whose setup answer it got but never used, is released at the disconnect;
- detached sessions keep counting against their token's share: a detached idle one
  makes room for its token's next session only by being released, so disconnecting
  never takes a token past its share (attaching them again takes none);
- another token never gets them released: at the host's limit it is refused, and
  told nothing of them.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from services.common.protocol import MSG_SESSION_LIMIT, MSG_SESSION_LIMIT_TOKEN
from tests.gateway.stack import RawClient
from tests.gateway.test_detach import active_sessions, cut, until
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _without_id(error: dict[str, object], sid: str) -> dict[str, object]:
    return {k: str(v).replace(sid, "<sid>") for k, v in error.items()}


async def _used_then_cut(gw: Gateway, client: RawClient) -> str:
    sid = str((await client.result("session/new", {}))["sessionId"])
    assert "echo: mine" in await client.say(sid, "mine")
    return sid


async def test_another_tokens_attach_is_answered_like_an_unknown_session(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        owner = RawClient(await gw.connect(await gw.token("owner")))
        sid = await _used_then_cut(gw, owner)
        cut(owner.ws)
        thief = RawClient(await gw.connect(await gw.token("thief")))
        unknown = str(uuid.uuid4())
        for method in ("session/load", "session/resume"):
            _, theirs = await thief.call(method, {"sessionId": sid})
            _, nobody = await thief.call(method, {"sessionId": unknown})
            assert "error" in theirs and "error" in nobody, (theirs, nobody)
            assert _without_id(theirs["error"], sid) == \
                _without_id(nobody["error"], unknown), (theirs, nobody)
        # ... and the owner still gets it back.
        again = RawClient(await gw.connect(await gw.token("owner2")))
        _, other = await again.call("session/resume", {"sessionId": sid})
        assert "error" in other, other  # a second token of the same user is another principal
        await thief.ws.close()
        await again.ws.close()


async def test_disconnecting_mid_setup_or_before_any_use_parks_nothing(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("parker")
        for _ in range(3):
            unused = RawClient(await gw.connect(token))
            await unused.result("session/new", {})  # answered, never used
            cut(unused.ws)
            midway = RawClient(await gw.connect(token))
            await midway.send("session/new", {})  # cut before the answer
            cut(midway.ws)

        async def none_left() -> bool:
            return await active_sessions(gw) == 0
        await until(none_left, "every unused session released at its disconnect")
        assert not any(e.get("event") == "session_detached" for e in gw.events())


async def test_detaching_never_takes_a_token_past_its_share(tmp_path: Path) -> None:
    """A detached idle session lets its token open another only by going itself: the
    token holds its share at most, detached sessions included."""
    async with running_gateway(tmp_path, max_sessions=8, per_token=2) as gw:
        token = await gw.token("hoarder")
        first = RawClient(await gw.connect(token))
        sids = [await _used_then_cut(gw, first) for _ in range(2)]
        cut(first.ws)

        async def detached() -> bool:
            return sum(e.get("event") == "session_detached" for e in gw.events()) == 2
        await until(detached, "both sessions detached")
        again = RawClient(await gw.connect(token))
        assert (await again.result("session/new", {}))["sessionId"]
        assert _released_for_room(gw) == [sids[0]]
        assert await active_sessions(gw) == 2
        # Attaching the other one again takes no slot, and leaves nothing to let go.
        await again.result("session/resume", {"sessionId": sids[1]})
        _, refused = await again.call("session/new", {})
        assert refused["error"]["code"] == -32001, refused
        assert refused["error"]["message"].startswith(MSG_SESSION_LIMIT_TOKEN.format(max=2))
        assert await active_sessions(gw) == 2
        await again.ws.close()


async def test_another_token_never_gets_your_detached_sessions_released(
        tmp_path: Path) -> None:
    """At the host's limit, another token's session/new is refused: the owner's detached
    idle sessions stay (its own room only), and the refusal names none of them."""
    async with running_gateway(tmp_path, max_sessions=3, per_token=2) as gw:
        owner_token = await gw.token("owner")
        owner = RawClient(await gw.connect(owner_token))
        sids = [await _used_then_cut(gw, owner) for _ in range(2)]
        cut(owner.ws)

        async def detached() -> bool:
            return sum(e.get("event") == "session_detached" for e in gw.events()) == 2
        await until(detached, "both sessions detached")
        thief = RawClient(await gw.connect(await gw.token("thief")))
        assert (await thief.result("session/new", {}))["sessionId"]  # the host's last slot
        work = tmp_path / "work"
        work.mkdir()
        for params in ({}, {"cwd": str(work)}):
            _, refused = await thief.call("session/new", params)
            assert refused["error"]["code"] == -32001, refused
            assert refused["error"]["message"].startswith(MSG_SESSION_LIMIT.format(max=3))
            assert not any(sid in json.dumps(refused) for sid in sids), refused
        assert _released_for_room(gw) == []
        back = RawClient(await gw.connect(owner_token))
        for sid in sids:  # still live, detached: attached again, nothing replayed from store
            await back.result("session/resume", {"sessionId": sid})
        assert await active_sessions(gw) == 3
        await thief.ws.close()
        await back.ws.close()


def _released_for_room(gw: Gateway) -> list[str]:
    return [str(e["session_id"]) for e in gw.events()
            if e.get("event") == "session_detach_released_for_room"]
