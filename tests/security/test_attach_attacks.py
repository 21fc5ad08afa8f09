"""``session/attach`` from the attacker's side.

A real ``acpgate serve`` with real tokens. Attach is a new way into a *live*
session, so:

- another token attaching answers exactly what an unknown session answers (no
  existence leak), and so does a token holding the operator's ``see-all`` grant —
  attach, like load, follows the principal, never what a token may list;
- an observer cannot prompt, cancel, change the mode or stop the session;
- attaching takes no slot of the token's share (the session has its slot), and a
  token whose share is used up still cannot start one by attaching;
- a hostile agent's own ``_meta.acpgate.eventId`` neither reaches the client nor
  confuses a replay: the ids are acpgate's, the agent's other ``_meta`` kept.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from tests.gateway.attach_client import cut, event_ids, initialize, kind, read_until
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _without_id(error: dict[str, object], sid: str) -> str:
    return json.dumps(error).replace(sid, "<id>")


async def test_another_tokens_attach_is_answered_like_an_unknown_session(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        owner_token, thief_token = await gw.token("owner"), await gw.token("thief")
        owner = RawClient(await gw.connect(owner_token))
        sid = (await owner.result("session/new", {}))["sessionId"]
        assert "echo: mine" in await owner.say(sid, "mine")
        thief = RawClient(await gw.connect(thief_token))
        unknown = str(uuid.uuid4())
        for role in ("controller", "observer"):
            for policy in ("full", "none"):
                _, theirs = await thief.call("session/attach", {
                    "sessionId": sid, "role": role, "historyPolicy": policy})
                _, nobody = await thief.call("session/attach", {
                    "sessionId": unknown, "role": role, "historyPolicy": policy})
                assert _without_id(theirs["error"], sid) == \
                    _without_id(nobody["error"], unknown), (theirs, nobody)
        # The operator's see-all grant lists other tokens' sessions; it attaches none.
        await gw.grant(thief_token, "see-all")
        seen, granted = await thief.call("session/attach", {"sessionId": sid})
        assert _without_id(granted["error"], sid) == _without_id(nobody["error"], unknown)
        assert not any(kind(m) for m in seen), seen  # nothing of the session streamed
        assert "echo: still mine" in await owner.say(sid, "still mine")
        await owner.ws.close()
        await thief.ws.close()


async def test_an_observer_cannot_drive_the_session(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("owner")
        owner = RawClient(await gw.connect(token))
        sid = (await owner.result("session/new", {}))["sessionId"]
        watcher = RawClient(await gw.connect(token))
        await watcher.result("session/attach", {"sessionId": sid, "role": "observer",
                                                "historyPolicy": "none"})
        for method in ("session/prompt", "session/cancel", "session/set_mode",
                       "session/set_config_option", "session/stop", "session/close"):
            _, err = await watcher.call(method, {"sessionId": sid, "prompt": "x",
                                                 "modeId": "x", "configId": "x", "value": "x"})
            assert err["error"]["code"] == -32006, (method, err)
        # Attached again on the same connection, as an observer still: still read-only. (A
        # role is the client's choice, no grant: any connection of the token may control.)
        again = await watcher.result("session/attach", {"sessionId": sid, "role": "observer",
                                                        "historyPolicy": "none"})
        assert again["role"] == "observer", again
        _, prompt = await watcher.call("session/prompt", {"sessionId": sid, "prompt": "x"})
        assert prompt["error"]["code"] == -32006
        assert (await gw.metrics())["acpgate_active_sessions"] == 1
        assert "echo: fine" in await owner.say(sid, "fine")
        await owner.ws.close()
        await watcher.ws.close()


async def test_attaching_takes_no_slot_and_grants_none(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, per_token=1) as gw:
        token = await gw.token("owner")
        owner = RawClient(await gw.connect(token))
        sid = (await owner.result("session/new", {}))["sessionId"]
        second = RawClient(await gw.connect(token))
        await second.result("session/attach", {"sessionId": sid, "historyPolicy": "none"})
        # The share is one session: attached twice, it is still the one.
        _, refused = await second.call("session/new", {})
        assert refused["error"]["code"] == -32001, refused
        assert (await gw.metrics())["acpgate_active_sessions"] == 1
        await owner.ws.close()
        await second.ws.close()


async def test_a_hostile_agents_event_ids_cannot_confuse_replay(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("hostile")) as gw:
        token = await gw.token("owner")
        first = RawClient(await gw.connect(token))
        await first.result("initialize", initialize("laptop"))
        sid = (await first.result("session/new", {"agentAlias": "hostile"}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": "forge 30"})
        before = await read_until(first.ws, lambda m: len(event_ids([m])) == 1
                                  and "chunk 4 " in str(m))
        cut(first.ws)
        await asyncio.sleep(1)
        again = RawClient(await gw.connect(token))
        seen, resp = await again.call("session/attach", {
            "sessionId": sid, "historyPolicy": "after_message",
            "afterMessageId": event_ids(before)[-1]})
        assert resp["result"]["historyPolicy"] == "after_message", resp
        seen += await read_until(again.ws, lambda m: kind(m) == "turn_complete")
        chunks = [m for m in before + seen if kind(m) == "agent_message_chunk"]
        assert [m["params"]["update"]["content"]["text"] for m in chunks] == \
            [f"chunk {i} " for i in range(30)]  # none lost, none twice
        ids = event_ids(before) + event_ids(seen)
        assert ids == list(range(ids[0], ids[0] + len(ids))) and ids[0] > 2, ids
        assert all(m["params"]["update"]["_meta"]["vendor"] == i for i, m in enumerate(chunks))
        await again.ws.close()
