"""A v2 client's ``session/prompt`` from the attacker's side.

A v2 prompt is answered (its ``messageId``) before its turn runs, and waits for the
running one: unlike a v1 prompt, no request stays in flight to bound what a client makes
the edge hold. Against a real ``acpgate serve`` with a scripted agent whose turn waits on
a permission request nobody answers:

- a flood of prompts gets at most ``MAX_WAITING`` accepted per session, the rest -32002
  with the way out — and once the turns ran, the session takes prompts again;
- an ``idempotencyKey`` longer than ``MAX_KEY_CHARS`` (which the edge would hold in
  memory with the live session) is -32602 and runs nothing;
- a key one token used neither answers nor suppresses another token's prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.edge.dialect.v2.prompt import MAX_KEY_CHARS, MAX_WAITING
from tests.gateway.attach_client import Message, kind
from tests.gateway.test_v2_gateway import INIT_V2, V2Socket
from tests.security.gateway_stack import Gateway, Token, running_gateway
from tests.security.scripted_agent import agent_section

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_FLOOD = MAX_WAITING + 20


def _idle(msg: Message) -> bool:
    return kind(msg) == "state_update" and msg["params"]["update"]["state"] == "idle"


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


async def _session(gw: Gateway, token: Token) -> tuple[V2Socket, str]:
    client = V2Socket(await gw.connect(token))
    await client.call("initialize", INIT_V2)
    _, new = await client.call("session/new", {"agentAlias": "scripted"})
    return client, new["sessionId"]


async def _answers(client: V2Socket, ids: set[int]) -> tuple[list[Message], dict[int, Message]]:
    """Read until every request of ``ids`` is answered: what came between, and the answers."""
    got: dict[int, Message] = {}
    seen = await client.until(lambda m: "method" not in m and m.get("id") in ids
                              and not got.update({m["id"]: m}) and set(got) == ids)
    return [m for m in seen if "method" in m], got


async def test_a_prompt_flood_and_long_keys_are_bounded(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        token = await gw.token("attacker")
        client, sid = await _session(gw, token)
        await client.call("session/prompt", {"sessionId": sid, "prompt": _text("ask")})
        await client.until(lambda m: m.get("method") == "session/request_permission")
        # The turn waits: every further prompt waits behind it.
        for key in ("k" * (MAX_KEY_CHARS + 1), "k" * 1_000_000):
            seen, answers = await _answers(client, {await client.send("session/prompt", {
                "sessionId": sid, "idempotencyKey": key, "prompt": _text("long key")})})
            (answer,) = answers.values()
            assert answer["error"]["code"] == -32602, str(answer)[:300]
            assert not seen, "a refused prompt is echoed as nothing"
        sent = {await client.send("session/prompt", {
            "sessionId": sid, "idempotencyKey": f"flood-{i}", "prompt": _text(f"queued {i}")}): i
            for i in range(_FLOOD)}
        _, answers = await _answers(client, set(sent))
        accepted = [a for a in answers.values() if "result" in a]
        refused = [a["error"] for a in answers.values() if "error" in a]
        assert len(accepted) == MAX_WAITING - 1, len(accepted)  # the waiting turn is one
        assert len(refused) == _FLOOD - len(accepted)
        assert all(e["code"] == -32002 and "session/cancel" in e["message"] for e in refused)
        # A refused prompt's key is not kept: its retry, later, is a prompt that runs.
        refused_key = next(f"flood-{sent[rid]}" for rid, a in answers.items() if "error" in a)
        # The waiting turn ends: the accepted ones run, one after the other.
        await client.send("session/cancel", {"sessionId": sid})
        ended = 0
        while ended < MAX_WAITING:
            ended += _idle(await client.read())
        retry, answers = await _answers(client, {await client.send("session/prompt", {
            "sessionId": sid, "idempotencyKey": refused_key,
            "prompt": _text("retried")})})
        assert "result" in next(iter(answers.values()))
        rest = await client.until(_idle)
        assert "echo: retried" in json.dumps(retry + rest)
        await client.ws.close()


async def test_a_key_is_one_sessions_never_another_tokens(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=agent_section("scripted")) as gw:
        owner, mine = await _session(gw, await gw.token("owner"))
        other, theirs = await _session(gw, await gw.token("other"))
        _, first = await owner.call("session/prompt", {
            "sessionId": mine, "idempotencyKey": "same", "prompt": _text("owner's")})
        await owner.until(_idle)
        _, second = await other.call("session/prompt", {
            "sessionId": theirs, "idempotencyKey": "same", "prompt": _text("other's")})
        assert second["messageId"] != first["messageId"]
        assert "echo: other's" in json.dumps(await other.until(_idle))
        await owner.ws.close()
        await other.ws.close()
