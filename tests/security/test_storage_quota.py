"""A token cannot fill the store: per-session and per-token byte quotas.

Five 15 MB prompts grew the store by 195 MB in twelve turns, with no limit. A real
``acpgate serve`` with small ``[store] max_session_bytes`` and ``max_token_bytes``:
one token's client sends big prompts until a turn would pass a quota. That turn is
answered -32004 with the quota's sentence (how much, which key to raise), another
token is not affected, and deleting a session gives its bytes back to its token. The
quotas count everything a session keeps — its conversation and its event log —, so
a client that goes on prompting past a quota grows the store by nothing: each turn is
answered -32004 and none of its events is logged.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import STORAGE_QUOTA_EXCEEDED
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: One prompt's text; its turn stores about four times that: the prompt and the model's
#: echo in the event log, and again in the conversation.
PROMPT = "q" * 20_000
#: Room for two turns and the third's log, not its conversation (about 10.5 prompts).
SESSION_LIMIT = 210_000
#: The first session's bytes, one more turn, and not the log of a second (15 prompts).
TOKEN_LIMIT = 300_000
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


async def replayed_prompts(client: RawClient, sid: str) -> list[str | None]:
    """The stop reason each prompt a load replays is marked with (None: completed)."""
    await client.result("session/close", {"sessionId": sid})
    seen, resp = await client.call("session/load", {"sessionId": sid})
    assert "result" in resp, resp
    ups = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
    return [(u.get("_meta") or {}).get("acpgate", {}).get("stopReason") for u in ups
            if u["sessionUpdate"] == "user_message_chunk"]


def stored(gw: Gateway, sid: str) -> tuple[int, int, int]:
    """What the store holds for ``sid``: its counted bytes, its log's stored bytes and
    its history's rows."""
    db = gw.data_dir / "sessions" / "acp-sessions.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (counted,) = conn.execute("SELECT stored_bytes FROM sessions WHERE id = ?",
                                  (sid,)).fetchone()
        (logged,) = conn.execute("SELECT COALESCE(SUM(length(payload) + length(prefix)), 0)"
                                 " FROM event_chunks WHERE session_id = ?", (sid,)).fetchone()
        (items,) = conn.execute("SELECT COUNT(*) FROM history WHERE session_id = ?",
                                (sid,)).fetchone()
    return counted, logged, items


async def test_session_and_token_quotas(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, extra=QUOTAS) as gw:
        alice = RawClient(await gw.connect(await gw.token("alice")))
        bob = RawClient(await gw.connect(await gw.token("bob")))

        first = (await alice.result("session/new", {}))["sessionId"]
        turns, error = await fill(alice, first)
        assert turns == 2 and error["code"] == STORAGE_QUOTA_EXCEEDED, error
        match = SESSION_QUOTA.fullmatch(error["message"])
        assert match, error
        used, limit = map(int, match.groups())
        assert limit == SESSION_LIMIT and used > limit
        # The refused turn's events fit and were logged (what the client saw, marked
        # failed); its conversation did not: the agent is restored with two turns.
        assert await replayed_prompts(alice, first) == [None, None, "failed"]
        counted, logged, _ = stored(gw, first)
        assert logged > 0 and counted <= SESSION_LIMIT

        # Alice's other sessions share her token's quota.
        second = (await alice.result("session/new", {}))["sessionId"]
        more, error = await fill(alice, second)
        assert error["code"] == STORAGE_QUOTA_EXCEEDED
        match = TOKEN_QUOTA.fullmatch(error["message"])
        assert match, error
        used, limit = map(int, match.groups())
        assert limit == TOKEN_LIMIT and used > limit
        assert more == 1 < turns  # the token's room ran out before this session's own
        # this refusal came from the log: none of the refused turn's events is stored
        assert await replayed_prompts(alice, second) == [None]

        # Bob is not affected by Alice's use.
        theirs = (await bob.result("session/new", {}))["sessionId"]
        assert "result" in await prompt(bob, theirs)

        # Deleting a session gives its bytes back to the token.
        assert await alice.result("session/delete", {"sessionId": first}) == {}
        assert "result" in await prompt(alice, second)
        await alice.ws.close()
        await bob.ws.close()


async def test_prompting_past_a_quota_stores_nothing(tmp_path: Path) -> None:
    """An attacker over its session's quota goes on prompting: every turn is answered
    -32004 and the store keeps exactly what it had — no prompt, no streamed event."""
    async with running_gateway(tmp_path, extra=QUOTAS) as gw:
        mallory = RawClient(await gw.connect(await gw.token("mallory")))
        sid = (await mallory.result("session/new", {}))["sessionId"]
        turns, error = await fill(mallory, sid)
        assert turns >= 1 and SESSION_QUOTA.fullmatch(error["message"]), error
        before = stored(gw, sid)
        for _ in range(5):
            error = (await prompt(mallory, sid))["error"]
            assert error["code"] == STORAGE_QUOTA_EXCEEDED and \
                SESSION_QUOTA.fullmatch(error["message"]), error
        assert stored(gw, sid) == before
        assert before[0] <= SESSION_LIMIT
        assert await replayed_prompts(mallory, sid) == [None] * turns + ["failed"]
        await mallory.ws.close()
