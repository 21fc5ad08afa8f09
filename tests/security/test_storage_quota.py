"""A token cannot fill the store: per-session and per-token byte quotas.

Five 15 MB prompts grew the store by 195 MB in twelve turns, with no limit. A real
``acpgate serve`` with small ``[store] max_session_bytes`` and ``max_token_bytes``:
one token's client sends big prompts until a turn would pass a quota. That turn is
answered -32004 with the quota's sentence (how much, which key to raise), nothing
of it is stored (a load replays the turns before it, no more), another token is
not affected, and deleting a session gives its bytes back to its token.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import STORAGE_QUOTA_EXCEEDED
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: One prompt's text; its turn stores about twice that (the prompt, the model's echo).
PROMPT = "q" * 20_000
SESSION_LIMIT = 100_000
TOKEN_LIMIT = 150_000
QUOTAS = f"\n[store]\nmax_session_bytes = {SESSION_LIMIT}\nmax_token_bytes = {TOKEN_LIMIT}\n"
SESSION_QUOTA = re.compile(r"Session storage quota exceeded \((\d+)/(\d+) bytes\): delete old "
                           r"sessions or raise \[store\] max_session_bytes")
TOKEN_QUOTA = re.compile(r"Token storage quota exceeded \((\d+)/(\d+) bytes\): delete old "
                         r"sessions or raise \[store\] max_token_bytes")


async def prompt(client: RawClient, sid: str) -> dict[str, Any]:
    _, resp = await client.call("session/prompt", {"sessionId": sid, "prompt": PROMPT})
    return resp


async def fill(client: RawClient, sid: str) -> tuple[int, dict[str, Any]]:
    """Prompt until a turn is refused: (turns stored, the refusal)."""
    for stored in range(100):
        resp = await prompt(client, sid)
        if "error" in resp:
            return stored, resp["error"]
        assert resp["result"]["stopReason"] == "end_turn"
    raise AssertionError("no quota was ever reached")


async def replayed_prompts(client: RawClient, sid: str) -> int:
    await client.result("session/close", {"sessionId": sid})
    seen, resp = await client.call("session/load", {"sessionId": sid})
    assert "result" in resp, resp
    return sum(1 for m in seen if m.get("method") == "session/update"
               and m["params"]["update"]["sessionUpdate"] == "user_message_chunk")


async def test_session_and_token_quotas(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=QUOTAS) as gw:
        alice = RawClient(await gw.connect(await gw.token("alice")))
        bob = RawClient(await gw.connect(await gw.token("bob")))

        first = (await alice.result("session/new", {}))["sessionId"]
        stored, error = await fill(alice, first)
        assert stored >= 1 and error["code"] == STORAGE_QUOTA_EXCEEDED, error
        match = SESSION_QUOTA.fullmatch(error["message"])
        assert match, error
        used, limit = map(int, match.groups())
        assert limit == SESSION_LIMIT and used > limit
        assert await replayed_prompts(alice, first) == stored  # nothing of the refused turn

        # Alice's other sessions share her token's quota.
        second = (await alice.result("session/new", {}))["sessionId"]
        more, error = await fill(alice, second)
        assert error["code"] == STORAGE_QUOTA_EXCEEDED
        match = TOKEN_QUOTA.fullmatch(error["message"])
        assert match, error
        used, limit = map(int, match.groups())
        assert limit == TOKEN_LIMIT and used > limit
        assert more < stored  # the token's room ran out before this session's own
        assert await replayed_prompts(alice, second) == more

        # Bob is not affected by Alice's use.
        theirs = (await bob.result("session/new", {}))["sessionId"]
        assert "result" in await prompt(bob, theirs)

        # Deleting a session gives its bytes back to the token.
        assert await alice.result("session/delete", {"sessionId": first}) == {}
        assert "result" in await prompt(alice, second)
        await alice.ws.close()
        await bob.ws.close()
