"""``session/fork`` from the attacker's side: a fork is a new way in to a session.

A real ``acpgate serve`` with tokens:

- Token B forks token A's session: answered exactly like a session that does not exist
  (with a ``see-all`` grant too: a grant reads, it never drives), nothing is written,
  A's secret reaches B nowhere — not in an answer, not in B's list, not in B's model.
- A fork counts against its token's share of sessions (-32001 past it) and its copied
  history against the token's storage quota (-32004, nothing written).
- A's fork holds A's session's history and nothing else: not B's, not another session's
  of A's; the fork's agent is seeded with exactly that.

Two hosts sharing one PostgreSQL store: a session host A serves is forked on host B
from what is stored; A keeps its claim and goes on serving the parent; the fork is B's;
and B does not ask its own agent process for a native fork of a session A's agent holds
(B's copy of the agent's storage may be behind): the transcript is carried over.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.session.v1 import session_pb2
from services.common.protocol import (
    MSG_SESSION_LIMIT_TOKEN,
    MSG_TOKEN_QUOTA,
    STORAGE_QUOTA_EXCEEDED,
)
from tests.e2e.harness import SDK_AGENT
from tests.gateway.stack import RawClient, Stack, full_stack
from tests.gateway.wsfixtures import mint, write_config
from tests.security.gateway_stack import Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SECRET = "swordfish-fork-91c2"


async def prompt(client: RawClient, sid: str, text: str) -> str:
    """The text the turn streamed (an external agent's result carries no ``content``:
    it is passed whole)."""
    return await client.say(sid, text)


async def listed(client: RawClient) -> dict[str, dict[str, Any]]:
    return {s["sessionId"]: s for s in (await client.result("session/list", {}))["sessions"]}


def stored_rows(gw: Gateway) -> int:
    db = gw.data_dir / "sessions" / "acp-sessions.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
    return int(count)


async def replayed_prompts(client: RawClient, sid: str) -> list[str]:
    seen, resp = await client.call("session/load", {"sessionId": sid})
    assert "result" in resp, resp
    return [m["params"]["update"]["content"]["text"] for m in seen
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "user_message_chunk"]


async def test_another_tokens_session_cannot_be_forked(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        alice = RawClient(await gw.connect(await gw.token("alice")))
        bob_token = await gw.token("bob")
        bob = RawClient(await gw.connect(bob_token))
        theirs = (await alice.result("session/new", {}))["sessionId"]
        await prompt(alice, theirs, f"remember {SECRET}")
        await alice.result("session/close", {"sessionId": theirs})  # stored, idle
        live = (await alice.result("session/new", {}))["sessionId"]  # active on its client
        await prompt(alice, live, f"remember {SECRET} too")
        mine = (await bob.result("session/new", {}))["sessionId"]
        rows = stored_rows(gw)

        for grant in (False, True):
            if grant:  # the operator's read grant does not let Bob drive Alice's session
                await gw.grant(bob_token, "see-all")
                assert theirs in await listed(bob)  # he may read it now ...
            for sid in (theirs, live):
                for params in ({"sessionId": sid}, {"sessionId": sid, "cwd": "/"},
                               {"sessionId": sid, "mcpServers": []}):
                    _, resp = await bob.call("session/fork", params)
                    assert resp.get("error") == {"code": -32000,
                                                 "message": f"Session not found: {sid}"}, resp
            _, missing = await bob.call("session/fork", {"sessionId": "made-up"})
            assert missing.get("error") == {"code": -32000,
                                            "message": "Session not found: made-up"}
        assert stored_rows(gw) == rows  # ... and no fork of it was written
        assert await prompt(alice, live, "still mine") == "echo: still mine"
        await gw.grant(bob_token, "see-all", revoke=True)
        assert set(await listed(bob)) == {mine}
        assert gw.model is not None
        asked = len(gw.model.requests)
        assert await prompt(bob, mine, "what do you know?") == "echo: what do you know?"
        assert gw.model.requests[asked:] and \
            SECRET not in json.dumps([r.body for r in gw.model.requests[asked:]])
        await alice.ws.close()
        await bob.ws.close()


async def test_a_fork_holds_its_parents_history_and_nothing_else(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        assert gw.model is not None
        alice = RawClient(await gw.connect(await gw.token("alice")))
        bob = RawClient(await gw.connect(await gw.token("bob")))
        bobs = (await bob.result("session/new", {}))["sessionId"]
        await prompt(bob, bobs, f"bob says {SECRET}")
        other = (await alice.result("session/new", {}))["sessionId"]
        await prompt(alice, other, "another session of alice")
        parent = (await alice.result("session/new", {}))["sessionId"]
        await prompt(alice, parent, "alice one")
        await prompt(alice, parent, "alice two")

        forked = await alice.result("session/fork", {"sessionId": parent})
        fork = forked["sessionId"]
        assert forked["_meta"] == {"acpgate": {"forkedFrom": parent}}
        assert await prompt(alice, fork, "in the fork") == "echo: in the fork"
        seen = gw.model.requests[-1].body["messages"]
        assert [m["content"] for m in seen if m["role"] == "user"] == \
            ["alice one", "alice two", "in the fork"]
        assert SECRET not in json.dumps(seen) and "another session" not in json.dumps(seen)

        await alice.result("session/close", {"sessionId": fork})
        assert await replayed_prompts(alice, fork) == ["alice one", "alice two", "in the fork"]
        rows = await listed(alice)
        assert rows[fork]["_meta"]["acpgate"]["forkedFrom"] == parent
        # The fork is Alice's: Bob cannot see, load or fork it.
        assert fork not in await listed(bob)
        for method in ("session/load", "session/fork"):
            _, resp = await bob.call(method, {"sessionId": fork})
            assert resp.get("error", {}).get("code") == -32000, resp
        await alice.ws.close()
        await bob.ws.close()


async def test_forks_count_against_the_tokens_share_and_quota(tmp_path: Path) -> None:
    quotas = "\n[store]\nmax_token_bytes = 175000\n"
    async with running_gateway(tmp_path, max_sessions=4, extra=quotas) as gw:
        alice = RawClient(await gw.connect(await gw.token("alice")))
        bob = RawClient(await gw.connect(await gw.token("bob")))
        first = (await alice.result("session/new", {}))["sessionId"]
        # about 50 kB of conversation, and as much of event log (a fork copies the former)
        await prompt(alice, first, "a" * 25_000)
        second = (await alice.result("session/new", {}))["sessionId"]
        _, resp = await alice.call("session/fork", {"sessionId": first})
        assert resp.get("error", {}).get("code") == -32001, resp
        assert resp["error"]["message"].startswith(MSG_SESSION_LIMIT_TOKEN.format(max=2)), resp
        assert (await bob.result("session/new", {}))["sessionId"]  # Bob is not affected

        await alice.result("session/close", {"sessionId": second})
        fork = (await alice.result("session/fork", {"sessionId": first}))["sessionId"]
        _, resp = await alice.call("session/new", {})  # the fork holds a slot of Alice's
        assert resp.get("error", {}).get("code") == -32001, resp

        # A second copy would take Alice past her token's storage: refused, nothing written.
        await alice.result("session/close", {"sessionId": fork})
        rows = stored_rows(gw)
        _, resp = await alice.call("session/fork", {"sessionId": first})
        error = resp.get("error", {})
        assert error.get("code") == STORAGE_QUOTA_EXCEEDED, resp
        pattern = re.escape(MSG_TOKEN_QUOTA).replace(r"\{used\}", r"\d+").replace(
            r"\{limit\}", "175000")
        assert re.fullmatch(pattern, error["message"]), error
        assert stored_rows(gw) == rows
        # Deleting the fork gives its bytes back.
        assert await alice.result("session/delete", {"sessionId": fork}) == {}
        assert (await alice.result("session/fork", {"sessionId": first}))["sessionId"]
        await alice.ws.close()
        await bob.ws.close()


# ------------------------------------------------------------------ two hosts, one store


def host(root: Path, name: str, store_url: str, token_db: Path, state: Path) -> Any:
    """A host of its own (config and data dir) on the shared store and token file, with the
    demo agent and an SDK agent that forks natively (its sessions in the shared ``state``)."""
    agent = f"""
[agents.sdkfork]
kind = "acp"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SDK_AGENT))}]
env = {{ SDK_AGENT_STATE = {json.dumps(str(state))}, SDK_AGENT_RESTORE = "resume", SDK_AGENT_FORK = "1" }}
"""
    cfg = write_config(root / name / "cfg",
                       extra=f'\n[store]\nurl = "{store_url}"\n' + agent)
    return replace(cfg, gateway=replace(cfg.gateway, token_db=str(token_db)))


@contextlib.asynccontextmanager
async def client(stack: Stack, secret: str) -> AsyncIterator[RawClient]:
    async with connect(stack.edge.url, proxy=None,
                       additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
        yield RawClient(ws)


async def row(stack: Stack, sid: str) -> session_pb2.SessionRow:
    return await stack.runtime.session_service.stub.GetSession(
        session_pb2.GetSessionRequest(session_id=sid))


async def test_a_session_another_host_serves_is_forked_from_the_store(
        tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    state = tmp_path / "shared-agent-state.json"
    cfg_a = host(tmp_path, "a", pg_url, token_db, state)
    cfg_b = host(tmp_path, "b", pg_url, token_db, state)
    _, secret = mint(cfg_a)
    work = tmp_path / "work"
    work.mkdir()
    async with full_stack(cfg_a) as a, full_stack(cfg_b) as b, \
            client(a, secret) as on_a, client(b, secret) as on_b:
        parent = (await on_a.result("session/new", {"agentAlias": "sdkfork",
                                                     "cwd": str(work)}))["sessionId"]
        await prompt(on_a, parent, "first message")
        held = await row(a, parent)
        assert held.claim.instance_id == a.runtime.gateway_instance_id

        forked = await on_b.result("session/fork", {"sessionId": parent, "cwd": str(work)})
        fork = forked["sessionId"]
        # What is stored, carried over: B's agent was not asked for its own fork.
        assert await prompt(on_b, fork, "recall") == "remembered 0 [] text:prior-ok"
        mine = await row(b, fork)
        assert (mine.forked_from, mine.claim.instance_id) == (parent,
                                                              b.runtime.gateway_instance_id)
        kept = await row(a, parent)  # A's claim untouched, A still serves the parent
        assert (kept.claim.instance_id, kept.claim.generation) == \
            (held.claim.instance_id, held.claim.generation)
        assert await prompt(on_a, parent, "still on A") == "echo: still on A"
        _, resp = await on_b.call("session/load", {"sessionId": parent})
        assert resp.get("error", {}).get("code") == -32602, resp  # "Session already active"

        # Closed on A (its claim dropped), the same fork on B is the agent's own.
        await on_a.result("session/close", {"sessionId": parent})
        again = (await on_b.result("session/fork", {"sessionId": parent,
                                                    "cwd": str(work)}))["sessionId"]
        assert await prompt(on_b, again, "recall") == \
            "remembered 2 [first message|still on A] no-embedded"
