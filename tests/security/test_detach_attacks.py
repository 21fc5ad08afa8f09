"""Detached sessions from the attacker's side (issue 27).

A real ``acpgate serve`` with the default ``[gateway] detach_grace_secs`` (600):

- another token's ``session/load``/``resume`` of a detached session is answered
  exactly like one of a session that does not exist — it never attaches it;
- a client cannot park agents by disconnecting: a session whose setup it cut,
  or whose setup answer it got but never used, is released at the disconnect;
- detached sessions keep counting against their token's share: disconnecting
  does not free slots for more sessions (attaching them again takes none).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from services.common.protocol import MSG_SESSION_LIMIT_TOKEN
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


async def test_detached_sessions_count_against_the_tokens_share(tmp_path: Path) -> None:
    full = {"code": -32001, "message": MSG_SESSION_LIMIT_TOKEN.format(max=2)}
    async with running_gateway(tmp_path, max_sessions=8) as gw:
        token = await gw.token("hoarder")
        first = RawClient(await gw.connect(token))
        sids = [await _used_then_cut(gw, first) for _ in range(2)]
        cut(first.ws)

        async def detached() -> bool:
            return sum(e.get("event") == "session_detached" for e in gw.events()) == 2
        await until(detached, "both sessions detached")
        again = RawClient(await gw.connect(token))
        _, refused = await again.call("session/new", {})
        assert refused.get("error") == full, refused
        # Attaching them again takes no slot.
        for sid in sids:
            await again.result("session/resume", {"sessionId": sid})
        _, refused = await again.call("session/new", {})
        assert refused.get("error") == full, refused
        await again.ws.close()
