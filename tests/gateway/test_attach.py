"""Live sessions: exact replay and several clients on one session.

A real ``acpgate serve`` (built-in agent, fake model). Every update carries the
session's event id; a client cut mid-turn (no close frame) comes back with
``session/attach`` ``after_message`` and the last id it saw, and gets exactly the
rest — whether the turn still runs or ended while it was away — the concatenated
text identical to an uncut run's. Several clients share one session: updates fan
out, another controller's prompt is echoed, a permission request goes to every
controller and the first answer wins, an observer watches only, and one that stops
reading is dropped without the session waiting for it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bench.flood import non_reading_client
from tests.gateway.attach_client import (
    WAITS_THEN_STREAMS,
    Message,
    cut,
    event_ids,
    initialize,
    is_turn_end,
    kind,
    read_until,
    text_of,
)
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import WAIT, Gateway, Token, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def client(gw: Gateway, token: Token, name: str) -> RawClient:
    """A connection that said who it is."""
    raw = RawClient(await gw.connect(token))
    await raw.result("initialize", initialize(name))
    return raw


async def uncut_text(gw: Gateway, token: Token, tmp: Path) -> str:
    """The assistant text of one uncut run of :data:`WAITS_THEN_STREAMS`."""
    go = tmp / "go-uncut"
    go.touch()
    c = await client(gw, token, "uncut")
    sid = (await c.result("session/new", {}))["sessionId"]
    seen, resp = await c.call("session/prompt", {
        "sessionId": sid, "prompt": WAITS_THEN_STREAMS.format(go=go)})
    assert resp["result"]["stopReason"] == "end_turn", resp
    await c.ws.close()
    return text_of(seen)


async def test_initialize_advertises_attach(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        c = RawClient(await gw.connect(await gw.token("t")))
        result = await c.result("initialize", initialize("editor"))
        assert result["agentCapabilities"]["sessionCapabilities"]["attach"] == {
            "roles": ["controller", "observer"]}
        await c.ws.close()


@pytest.mark.parametrize("ended_while_away", [False, True])
async def test_a_cut_client_reattaches_and_misses_nothing(tmp_path: Path,
                                                          ended_while_away: bool) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        reference = await uncut_text(gw, token, tmp_path)
        assert reference.count("w") == 60, reference
        go = tmp_path / "go"
        first = await client(gw, token, "laptop")
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid,
                                            "prompt": WAITS_THEN_STREAMS.format(go=go)})
        before = await read_until(first.ws, lambda m: kind(m) == "tool_call")
        cut(first.ws)  # mid-turn: the tool waits for ``go``
        if ended_while_away:
            go.touch()  # the rest streams to nobody, the turn ends and is stored

            async def stored() -> bool:
                return gw.stored_items(sid) > 0
            await _until(stored)
        await asyncio.sleep(2)  # the Wi-Fi comes back

        again = await client(gw, token, "laptop")
        last = event_ids(before)[-1]
        seen, resp = await again.call("session/attach", {
            "sessionId": sid, "role": "controller", "historyPolicy": "after_message",
            "afterMessageId": last})
        assert resp["result"]["historyPolicy"] == "after_message", resp
        go.touch()
        if not any(is_turn_end(m) for m in seen):
            seen += await read_until(again.ws, is_turn_end)
        after = [m for m in seen if m.get("method") == "session/update"]
        assert after[-1]["params"]["update"]["stopReason"] == "end_turn", after[-1]
        # Exactly what it had not seen: the next ids, none twice, none left out.
        ids = event_ids(before) + event_ids(after)
        assert ids == list(range(ids[0], ids[0] + len(ids))), ids
        assert text_of(before) + text_of(after) == reference
        # Message ids (Message ID RFD): the answer's chunks are one message.
        assert len({m["params"]["update"]["messageId"] for m in after
                    if kind(m) == "agent_message_chunk"}) == 1
        # The session is this connection's now.
        assert "echo: next" in await again.say(sid, "next")
        await again.ws.close()


async def test_resume_of_a_turn_ended_while_detached_replays_the_missed_updates(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        go = tmp_path / "go"
        first = await client(gw, token, "laptop")
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid,
                                            "prompt": WAITS_THEN_STREAMS.format(go=go)})
        before = await read_until(first.ws, lambda m: kind(m) == "tool_call")
        cut(first.ws)
        go.touch()

        async def stored() -> bool:
            return gw.stored_items(sid) > 0
        await _until(stored)
        again = await client(gw, token, "laptop")
        seen, resp = await again.call("session/resume", {
            "sessionId": sid, "_meta": {"acpgate": {"afterEventId": event_ids(before)[-1]}}})
        assert "result" in resp, resp
        ids = event_ids(before) + event_ids(seen)
        assert ids == list(range(ids[0], ids[0] + len(ids))), ids
        assert text_of(seen).count("w") == 60  # every chunk streamed while away
        assert [m["params"]["update"]["stopReason"] for m in seen if is_turn_end(m)] == \
            ["end_turn"]
        await again.ws.close()


async def test_a_permission_pending_across_a_cut_is_answered_after_the_attach(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, autonomy="supervised") as gw:
        token = await gw.token("laptop")
        first = await client(gw, token, "laptop")
        sid = (await first.result("session/new", {}))["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": "shell echo approved"})
        before = await read_until(first.ws, _asks)
        cut(first.ws)  # the question stays open
        await asyncio.sleep(2)
        again = await client(gw, token, "laptop")
        await again.send("session/attach", {
            "sessionId": sid, "historyPolicy": "after_message",
            "afterMessageId": event_ids(before)[-1]})
        asked = (await read_until(again.ws, _asks))[-1]
        allow = next(o["optionId"] for o in asked["params"]["options"]
                     if o["kind"] == "allow_once")
        await again.ws.send(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": allow}}}))
        rest = await read_until(again.ws, is_turn_end)
        assert "approved" in text_of(rest)
        assert rest[-1]["params"]["update"]["stopReason"] == "end_turn"
        await again.ws.close()


async def test_a_second_client_attaches_while_the_first_still_holds_the_session(
        tmp_path: Path) -> None:
    """The fast reconnect: the old connection is not known dead yet. Attach joins."""
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        first = await client(gw, token, "laptop")
        sid = (await first.result("session/new", {}))["sessionId"]
        assert "echo: one" in await first.say(sid, "one")
        second = await client(gw, token, "phone")
        seen, resp = await second.call("session/attach", {"sessionId": sid})
        result = resp["result"]
        assert result["role"] == "controller" and result["historyPolicy"] == "full"
        assert {c["name"] for c in result["connectedClients"]} == {"laptop", "phone"}
        assert "echo: one" in text_of(seen)  # the stored history replayed
        # The second one prompts: the first sees the prompt echoed, then the answer.
        assert "echo: two" in await second.say(sid, "two")
        got = await read_until(first.ws, is_turn_end)
        echo = next(m["params"]["update"] for m in got if kind(m) == "prompt_received")
        assert echo["prompt"] == "two" and echo["sentBy"]["name"] == "phone", echo
        assert "echo: two" in text_of(got)
        # The first one leaves; the second is told, and the session goes on with it.
        await first.ws.close()
        gone = (await read_until(second.ws, lambda m: kind(m) == "client_disconnected"))[-1]
        assert gone["params"]["update"]["client"] == {
            "name": "laptop", "version": "1.0", "role": "controller"}, gone
        assert "echo: three" in await second.say(sid, "three")
        assert (await gw.metrics())["acpgate_active_sessions"] == 1
        await second.ws.close()


async def test_two_controllers_race_on_one_permission(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, autonomy="supervised") as gw:
        token = await gw.token("laptop")
        a = await client(gw, token, "laptop")
        sid = (await a.result("session/new", {}))["sessionId"]
        b = await client(gw, token, "phone")
        await b.result("session/attach", {"sessionId": sid, "historyPolicy": "none"})
        await a.send("session/prompt", {"sessionId": sid, "prompt": "shell echo approved"})
        ask_a = (await read_until(a.ws, _asks))[-1]
        ask_b = (await read_until(b.ws, _asks))[-1]
        allow = next(o["optionId"] for o in ask_b["params"]["options"]
                     if o["kind"] == "allow_once")
        reject = next(o["optionId"] for o in ask_a["params"]["options"]
                      if o["kind"] == "reject_once")
        # Both answer, the phone first: its answer reaches the agent, the laptop's does not.
        await b.ws.send(json.dumps({"jsonrpc": "2.0", "id": ask_b["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": allow}}}))
        got_a = await read_until(a.ws, lambda m: kind(m) == "permission_resolved")
        if not any(m.get("method") == "$/cancel_request" for m in got_a):
            got_a += await read_until(a.ws, lambda m: m.get("method") == "$/cancel_request")
        await a.ws.send(json.dumps({"jsonrpc": "2.0", "id": ask_a["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": reject}}}))
        withdrawn = [m for m in got_a if m.get("method") == "$/cancel_request"]
        assert [m["params"]["requestId"] for m in withdrawn] == [ask_a["id"]], got_a
        resolved = next(m for m in got_a if kind(m) == "permission_resolved")["params"]["update"]
        assert resolved["chosenOptionId"] == allow, resolved
        assert resolved["resolvedBy"]["name"] == "phone", resolved
        done = await read_until(a.ws, lambda m: "id" in m and "method" not in m)
        assert done[-1]["result"]["stopReason"] == "end_turn", done[-1]
        assert "approved" in text_of(done)  # the phone's allow ran the command
        b_rest = await read_until(b.ws, is_turn_end)
        assert not any(kind(m) == "permission_resolved" for m in b_rest)  # it answered
        await a.ws.close()
        await b.ws.close()


async def test_an_observer_watches_and_cannot_act(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, autonomy="supervised") as gw:
        token = await gw.token("laptop")
        owner = await client(gw, token, "laptop")
        sid = (await owner.result("session/new", {}))["sessionId"]
        watcher = await client(gw, token, "dashboard")
        resp = await watcher.result("session/attach", {
            "sessionId": sid, "role": "observer", "historyPolicy": "none"})
        assert resp["role"] == "observer"
        for method, params in (("session/prompt", {"sessionId": sid, "prompt": "hi"}),
                               ("session/cancel", {"sessionId": sid}),
                               ("session/set_mode", {"sessionId": sid, "modeId": "x"})):
            _, err = await watcher.call(method, params)
            assert err["error"]["code"] == -32006, (method, err)
            assert "observer" in err["error"]["message"]
        await owner.send("session/prompt", {"sessionId": sid, "prompt": "shell echo seen"})
        ask = (await read_until(owner.ws, _asks))[-1]
        allow = next(o["optionId"] for o in ask["params"]["options"]
                     if o["kind"] == "allow_once")
        await owner.ws.send(json.dumps({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": allow}}}))
        watched = await read_until(watcher.ws, is_turn_end)
        assert not any(_asks(m) for m in watched)  # never asked
        assert kind(watched[0]) == "prompt_received", watched[0]
        assert any(kind(m) == "permission_resolved" for m in watched)
        assert "seen" in text_of(watched)
        # An answer it makes up for an id it was never asked reaches nobody.
        await watcher.ws.send(json.dumps({"jsonrpc": "2.0", "id": "zc-out-0", "result": {
            "outcome": {"outcome": "selected", "optionId": allow}}}))
        _, detached = await watcher.call("session/detach", {"sessionId": sid})
        assert detached["result"] == {"sessionId": sid, "status": "detached"}
        assert "echo: still" in await owner.say(sid, "still")
        await owner.ws.close()
        await watcher.ws.close()


async def test_an_observer_that_stops_reading_is_dropped_and_the_session_goes_on(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway="attach_queue_chars = 20000\n") as gw:
        token = await gw.token("laptop")
        owner = await client(gw, token, "laptop")
        sid = (await owner.result("session/new", {}))["sessionId"]
        async with non_reading_client(gw.url, token.secret) as stalled:
            await stalled.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/attach",
                                           "params": {"sessionId": sid, "role": "observer",
                                                      "historyPolicy": "none"}}))
            assert "result" in json.loads(await asyncio.wait_for(stalled.recv(), WAIT))
            # From now on it reads nothing. The controller's turns go on regardless.
            turns = 0
            for turns in range(1, 41):  # noqa: B007 (counted: the drop came within)
                seen, resp = await owner.call("session/prompt",
                                              {"sessionId": sid, "prompt": "stream 2000"})
                assert resp["result"]["stopReason"] == "end_turn", resp
                assert text_of(seen).count("w") == 2000
                if any(e.get("event") == "attachment_dropped" for e in gw.events()):
                    break
            dropped = [e for e in gw.events() if e.get("event") == "attachment_dropped"]
            assert dropped and dropped[0]["reason"] == "slow_client", dropped
            assert turns < 40
        await owner.ws.close()


async def test_detach_leaves_the_session_for_another_controller(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("laptop")
        a = await client(gw, token, "laptop")
        sid = (await a.result("session/new", {}))["sessionId"]
        assert "echo: one" in await a.say(sid, "one")
        _, resp = await a.call("session/detach", {"sessionId": sid})
        assert resp["result"]["status"] == "detached", resp
        _, refused = await a.call("session/prompt", {"sessionId": sid, "prompt": "x"})
        assert refused["error"]["code"] == -32000, refused  # not this connection's any more
        b = await client(gw, token, "phone")
        await b.result("session/attach", {"sessionId": sid, "historyPolicy": "none"})
        assert "echo: two" in await b.say(sid, "two")
        await a.ws.close()
        await b.ws.close()


def _asks(msg: Message) -> bool:
    return msg.get("method") == "session/request_permission"


async def _until(check: object) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not await check():  # type: ignore[operator]
        assert loop.time() < deadline, "never happened"
        await asyncio.sleep(0.1)



async def test_attaching_again_on_the_same_connection_changes_role_and_replays(
        tmp_path: Path) -> None:
    """A connection attached already attaches again without a detach: a replay after a
    point, a role change; the session and a permission request pending on the connection
    stay."""
    async with running_gateway(tmp_path, autonomy="supervised") as gw:
        token = await gw.token("laptop")
        a = await client(gw, token, "laptop")
        sid = (await a.result("session/new", {}))["sessionId"]
        await a.send("session/prompt", {"sessionId": sid, "prompt": "shell echo approved"})
        seen = await read_until(a.ws, _asks)
        ask = seen[-1]
        first = event_ids(seen)[0]
        replayed, resp = await a.call("session/attach", {
            "sessionId": sid, "historyPolicy": "after_message", "afterMessageId": first})
        assert resp["result"]["role"] == "controller", resp
        assert resp["result"]["historyPolicy"] == "after_message", resp
        assert event_ids(replayed) == event_ids(seen)[1:], (replayed, seen)
        # The permission request asked before the attach is answered after it.
        allow = next(o["optionId"] for o in ask["params"]["options"]
                     if o["kind"] == "allow_once")
        await a.ws.send(json.dumps({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "outcome": {"outcome": "selected", "optionId": allow}}}))
        done = await read_until(a.ws, lambda m: m.get("id") is not None and "result" in m
                                and "stopReason" in m["result"])
        assert "approved" in text_of(done), done

        # Observer, then controller again (a second controller holds the session meanwhile).
        b = await client(gw, token, "phone")
        await b.result("session/attach", {"sessionId": sid, "historyPolicy": "none"})
        watching = await a.result("session/attach", {
            "sessionId": sid, "role": "observer", "historyPolicy": "none"})
        assert watching["role"] == "observer", watching
        _, refused = await a.call("session/prompt", {"sessionId": sid, "prompt": "x"})
        assert refused["error"]["code"] == -32006, refused
        assert "echo: from b" in await b.say(sid, "from b")
        await a.result("session/attach", {"sessionId": sid, "historyPolicy": "none"})
        assert "echo: back" in await a.say(sid, "back")
        await a.ws.close()
        await b.ws.close()
