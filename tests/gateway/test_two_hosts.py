"""Two gateway hosts sharing one PostgreSQL store, in one test process (SPEC §8).

Each "host" is a full stack of its own — session service, lifecycle service
(its own gateway instance id and leases), runtime and WebSocket edge — with its
own data dir; both session services open the same PostgreSQL database (a
fresh schema of the session's throwaway cluster) and both edges read one
token file (``[gateway] token_db``), so a client is the same principal on
either host. The real-process version, ``acpgate serve`` twice with a kill -9,
is ``test_serve_two_hosts.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from acpgate_contracts.session.v1 import session_pb2
from services.common.config import Config
from services.common.protocol import MSG_SESSION_ALREADY_ACTIVE, MSG_SESSION_NOT_FOUND

from .stack import RawClient, Stack, full_stack, select
from .wsfixtures import mint, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def host_config(root: Path, name: str, store_url: str, token_db: Path,
                lease_secs: int = 30) -> Config:
    """One host's config: its own config and data dir, the shared store and token file."""
    cfg = write_config(root / name / "cfg",
                       extra=f'\n[store]\nurl = "{store_url}"\nlease_secs = {lease_secs}\n')
    return replace(cfg, gateway=replace(cfg.gateway, token_db=str(token_db)))


@contextlib.asynccontextmanager
async def client(stack: Stack, secret: str) -> AsyncIterator[RawClient]:
    async with connect(stack.edge.url, proxy=None,
                       additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
        yield RawClient(ws, select("allow-once"))


def updates(seen: list[dict[str, Any]], kind: str) -> list[str]:
    return [m["params"]["update"]["content"]["text"] for m in seen
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == kind]


async def open_leases(stack: Stack, sid: str) -> list[lifecycle_pb2.Lease]:
    """The host's OPEN leases of the session (a live adapter)."""
    return [le for le in await stack.leases(f"agent:assistant:acp:{sid}")
            if le.state == lifecycle_pb2.LEASE_STATE_OPEN]


async def row(stack: Stack, sid: str) -> session_pb2.SessionRow:
    return await stack.runtime.session_service.get_session(sid)


async def test_a_session_moves_between_hosts_and_one_host_serves_it(
    tmp_path: Path, pg_url: str,
) -> None:
    """Created and prompted on host A; host B refuses to load it while A serves it ("Session
    already active", SPEC §8) — but a client that may not see it gets "not found" there
    (the visibility check comes first); closed on A, B loads it with the whole history
    replayed, its adapter seeded with it, and prompts it."""
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)
    _, secret = mint(cfg_a, "alice")
    _, stranger = mint(cfg_a, "mallory")
    async with full_stack(cfg_a) as a, full_stack(cfg_b) as b:
        assert a.runtime.gateway_instance_id != b.runtime.gateway_instance_id
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            first = await on_a.result("session/prompt", {"sessionId": sid,
                                                         "prompt": "hello from host A"})
            assert first["stopReason"] == "end_turn"
            stored = await row(b, sid)  # B's session service reads A's row
            assert stored.claim.instance_id == a.runtime.gateway_instance_id
            assert stored.claim.host == a.runtime.claims.host

            async with client(b, secret) as on_b:
                _, resp = await on_b.call("session/load", {"sessionId": sid})
                assert resp["error"]["code"] == -32602
                assert resp["error"]["message"] == MSG_SESSION_ALREADY_ACTIVE.format(session_id=sid)
                # ...saying where it is live, so the client can attach it there.
                assert resp["error"]["data"]["acpgate"]["liveAt"] == {
                    "host": a.runtime.claims.host, "instanceId": a.runtime.claims.instance_id}
            async with client(b, stranger) as other:
                _, resp = await other.call("session/load", {"sessionId": sid})
                assert resp["error"] == {"code": -32000, "message":
                                         MSG_SESSION_NOT_FOUND.format(session_id=sid)}
            assert await on_a.result("session/close", {"sessionId": sid}) == {}
        released = await row(b, sid)
        assert released.claim.instance_id == "" and released.state == session_pb2.SESSION_STATE_INACTIVE

        async with client(b, secret) as on_b:
            seen, resp = await on_b.call("session/load", {"sessionId": sid})
            assert set(resp["result"]) == {"modes", "configOptions"}
            assert updates(seen, "user_message_chunk") == ["hello from host A"]
            assert "hello from host A" in "".join(updates(seen, "agent_message_chunk"))
            assert (await row(a, sid)).claim.instance_id == b.runtime.gateway_instance_id
            before = (await row(b, sid)).token_count
            res = await on_b.result("session/prompt", {"sessionId": sid, "prompt": "and B"})
            assert res["stopReason"] == "end_turn" and "and B" in res["content"]
            seeded = (await row(b, sid)).token_count - before
            # The same prompt in a fresh session on B: fewer input tokens, no history.
            fresh = (await on_b.result("session/new", {}))["sessionId"]
            await on_b.result("session/prompt", {"sessionId": fresh, "prompt": "and B"})
            assert seeded > (await row(b, fresh)).token_count
            history = [item async for page in b.runtime.session_service.stub.StreamHistory(
                session_pb2.StreamHistoryRequest(session_id=sid)) for item in page.items]
            users = [i.text for i in history if i.role == session_pb2.HistoryItem.ROLE_USER]
            assert users == ["hello from host A", "and B"]
        # Each host's lifecycle service holds leases of its own sessions only.
        assert all(le.gateway_instance_id == a.runtime.gateway_instance_id
                   for le in await a.leases())
        assert all(le.gateway_instance_id == b.runtime.gateway_instance_id
                   for le in await b.leases())


async def test_racing_loads_on_two_hosts_one_wins(tmp_path: Path, pg_url: str) -> None:
    """The same stored session loaded on both hosts at the same moment: one load answers
    {}, the other "Session already active"; only the winner runs an adapter for it."""
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)
    _, secret = mint(cfg_a)
    async with full_stack(cfg_a) as a, full_stack(cfg_b) as b:
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            await on_a.result("session/close", {"sessionId": sid})
        for _ in range(3):
            async with client(a, secret) as on_a, client(b, secret) as on_b:
                outcomes = await asyncio.gather(
                    on_a.call("session/load", {"sessionId": sid}),
                    on_b.call("session/load", {"sessionId": sid}))
                answers = [resp for _, resp in outcomes]
                won = [i for i, r in enumerate(answers) if "result" in r]
                assert len(won) == 1, answers
                lost = answers[1 - won[0]]
                assert lost["error"]["message"] == MSG_SESSION_ALREADY_ACTIVE.format(session_id=sid)
                winner, loser = (a, b) if won[0] == 0 else (b, a)
                assert sid in winner.runtime.registry.active
                assert sid not in loser.runtime.registry.active
                assert not await open_leases(loser, sid)  # the loser never spawned an adapter
                await (on_a if won[0] == 0 else on_b).result("session/close", {"sessionId": sid})


async def test_a_host_that_lost_its_claim_stops_serving(tmp_path: Path, pg_url: str) -> None:
    """Host A's claim is taken over behind its back (as after A stalled past the lease
    time): A's next heartbeat learns it and A releases the session at once — its adapter
    closed through its own lifecycle service, the other holder's claim left alone."""
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db, lease_secs=1)
    _, secret = mint(cfg_a)
    async with full_stack(cfg_a) as a, client(a, secret) as on_a:
        sid = (await on_a.result("session/new", {}))["sessionId"]
        con = await asyncpg.connect(pg_url)
        try:
            await con.execute("UPDATE sessions SET active_instance_id = 'gw-elsewhere',"
                              " active_host = 'elsewhere' WHERE id = $1", sid)
        finally:
            await con.close()
        for _ in range(100):
            if sid not in a.runtime.registry.active:
                break
            await asyncio.sleep(0.05)
        assert sid not in a.runtime.registry.active
        for _ in range(100):
            if not await open_leases(a, sid):
                break
            await asyncio.sleep(0.05)
        assert not await open_leases(a, sid)
        stolen = await row(a, sid)
        assert stolen.claim.instance_id == "gw-elsewhere"
        assert stolen.state == session_pb2.SESSION_STATE_ACTIVE  # the holder's, untouched
        _, resp = await on_a.call("session/prompt", {"sessionId": sid, "prompt": "still?"})
        assert resp["error"]["code"] == -32000


async def test_delete_spares_a_session_another_host_serves(tmp_path: Path, pg_url: str) -> None:
    """``session/delete`` with several hosts: a client that may not see the session
    gets "not found" (visibility first); while host A serves it, host B answers "Session
    already active" and removes nothing; once A closed it, B deletes row and history."""
    token_db = tmp_path / "shared" / "tokens.db"
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)
    _, secret = mint(cfg_a, "alice")
    _, stranger = mint(cfg_a, "mallory")
    async with full_stack(cfg_a) as a, full_stack(cfg_b) as b:
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            await on_a.result("session/prompt", {"sessionId": sid, "prompt": "keep me"})
            async with client(b, stranger) as other:
                _, resp = await other.call("session/delete", {"sessionId": sid})
                assert resp["error"] == {"code": -32000, "message":
                                         MSG_SESSION_NOT_FOUND.format(session_id=sid)}
            async with client(b, secret) as on_b:
                _, resp = await on_b.call("session/delete", {"sessionId": sid})
                assert resp["error"] == {"code": -32602, "message":
                                         MSG_SESSION_ALREADY_ACTIVE.format(session_id=sid)}
            kept = await row(b, sid)
            assert kept.claim.instance_id == a.runtime.gateway_instance_id
            assert sid in a.runtime.registry.active
            await on_a.result("session/close", {"sessionId": sid})
        async with client(b, secret) as on_b:
            assert await on_b.result("session/delete", {"sessionId": sid}) == {}
            _, resp = await on_b.call("session/load", {"sessionId": sid})
            assert resp["error"]["code"] == -32000
