"""acpgate's cursors from the attacker's side: ``session/resume`` with a v2
``replayFrom: {"type": "_acpgate_event"}`` (and v1's ``_meta.acpgate.afterEventId``), and
``session/list``'s page cursor.

A real ``acpgate serve`` with real tokens and the built-in agent:

- another token's cursor into a session (detached and live in the ring, or stopped and
  read from its log in the store) is answered exactly like one into a session that does
  not exist, and nothing of the session streams to it;
- a forged cursor — beyond any event id the store can hold, negative, not a number — is
  a clear error or no replay at all, never an internal error; the session stays the
  owner's to resume from a real cursor;
- a forged page cursor (acpgate's is base64 of a JSON array) — one nested deeper than
  the JSON parser goes among them — is -32602 ``invalid cursor``, never an internal error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.attach_client import Message, cut, event_id, kind
from tests.gateway.stack import RawClient
from tests.gateway.test_v2_gateway import INIT_V2, V2Socket
from tests.security.gateway_stack import Gateway, Token, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: Cursors no event can have: past the store's signed 64-bit ids (as a number and as the
#: decimal string a client may send), negative, fractional, the wrong type.
FORGED = (2**63, 10**30, "9999999999999999999", -1, 1.5, "1e3", None, [1])


def _cursor(event: Any) -> dict[str, Any]:
    return {"type": "_acpgate_event", "eventId": event}


async def _answer(client: V2Socket, method: str, params: dict[str, Any]
                  ) -> tuple[list[Message], dict[str, Any]]:
    """Send one request; the messages before its answer, and the answer (result or error)."""
    rid = await client.send(method, params)
    seen = await client.until(lambda m: "method" not in m and m.get("id") == rid)
    return seen[:-1], seen[-1]


async def _v2(gw: Gateway, token: Token) -> V2Socket:
    client = V2Socket(await gw.connect(token))
    await client.call("initialize", INIT_V2)
    return client


def _idle(msg: Message) -> bool:
    return kind(msg) == "state_update" and msg["params"]["update"]["state"] == "idle"


def _like_unknown(theirs: dict[str, Any], sid: str, nobody: dict[str, Any],
                  unknown: str) -> bool:
    return json.dumps(theirs["error"]).replace(sid, "<id>") == \
        json.dumps(nobody["error"]).replace(unknown, "<id>")


async def _owned_session(gw: Gateway, token: Token) -> tuple[V2Socket, str, int]:
    """A session of ``token`` with one turn: the client, its id and its first event id."""
    owner = await _v2(gw, token)
    _, new = await owner.call("session/new", {})
    sid = new["sessionId"]
    await owner.call("session/prompt", {"sessionId": sid,
                                        "prompt": [{"type": "text", "text": "secret"}]})
    turn = await owner.until(_idle)
    first = next(e for m in turn if (e := event_id(m)) is not None)
    return owner, sid, first


async def test_another_tokens_cursor_is_answered_like_an_unknown_session(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        owner_token, thief_token = await gw.token("owner"), await gw.token("thief")
        owner, sid, first = await _owned_session(gw, owner_token)
        cut(owner.ws)  # detached: live, its updates in the ring
        await asyncio.sleep(1)
        thief = await _v2(gw, thief_token)
        unknown = str(uuid.uuid4())

        async def probe() -> None:
            for event in (first, 1, 2**63 - 1):
                seen, theirs = await _answer(thief, "session/resume", {
                    "sessionId": sid, "cwd": "/", "replayFrom": _cursor(event)})
                _, nobody = await _answer(thief, "session/resume", {
                    "sessionId": unknown, "cwd": "/", "replayFrom": _cursor(event)})
                assert "error" in theirs and _like_unknown(theirs, sid, nobody, unknown), \
                    (theirs, nobody)
                assert not any(sid in json.dumps(m) for m in seen), seen

        await probe()
        # Back with its owner, then stopped: the log in the store is all there is.
        owner = await _v2(gw, owner_token)
        _, resumed = await owner.call("session/resume", {"sessionId": sid, "cwd": "/",
                                                         "replayFrom": _cursor(first)})
        assert resumed["_meta"]["acpgate"]["replay"] == "events"
        await owner.call("session/close", {"sessionId": sid})
        await probe()
        await thief.ws.close()
        await owner.ws.close()


async def test_a_forged_cursor_is_refused_never_an_internal_error(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("owner")
        owner, sid, first = await _owned_session(gw, token)
        await owner.call("session/close", {"sessionId": sid})  # resumed from the log now
        for event in FORGED:
            seen, answer = await _answer(owner, "session/resume", {
                "sessionId": sid, "cwd": "/", "replayFrom": _cursor(event)})
            assert answer.get("error", {}).get("code") == -32602, (event, answer)
            assert not seen, (event, seen)
        # v1's cursor, past what the store holds: no replay from the log, still a resume.
        v1 = RawClient(await gw.connect(token))
        await v1.result("initialize", {"protocolVersion": 1})
        for event in (2**63, "9999999999999999999"):
            seen, answer = await v1.call("session/resume", {
                "sessionId": sid, "cwd": "/", "_meta": {"acpgate": {"afterEventId": event}}})
            assert "result" in answer, (event, answer)
            assert not [m for m in seen if event_id(m) is not None], seen
            await v1.result("session/close", {"sessionId": sid})
        await v1.ws.close()
        # The real cursor still replays the turn, from its first event.
        _, resumed = await owner.call("session/resume", {"sessionId": sid, "cwd": "/",
                                                         "replayFrom": _cursor(first)})
        assert resumed["_meta"]["acpgate"]["replay"] == "events"
        await owner.ws.close()
        assert not [e for e in gw.events() if e.get("event") == "handler_failed"]


async def test_a_forged_list_cursor_is_refused_never_an_internal_error(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        client = RawClient(await gw.connect(await gw.token("owner")))
        await client.result("initialize", {"protocolVersion": 1})
        for raw in (b"[" * 5000, b"[" * 900 + b"]" * 900, b"{}", b"[1]", b"\xff"):
            cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
            _, answer = await client.call("session/list", {"cursor": cursor})
            assert answer.get("error", {}).get("code") == -32602, (raw[:8], answer)
        await client.ws.close()
        assert not [e for e in gw.events() if e.get("event") == "service_call_failed"]
