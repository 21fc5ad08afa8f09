"""Host liveness on PostgreSQL: a claim is live only while its host's advisory lock is held.

Two stores on one database stand for two hosts' session services. Each holds, on a
connection of its own, the lock of every host it claims for; when that connection
ends (the process died, the server dropped it), the host's claims can be taken at
once — the lease is set far longer than any test, so a takeover proves the lock,
never the clock. The claim generation still fences a host that comes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.session.store import (
    HistoryEntry,
    NewSession,
    SessionActiveElsewhere,
    SessionStore,
    open_store,
)
from services.session.store.postgres import db as pg_db
from services.session.store.postgres import liveness as pg_liveness
from services.session.store.postgres.db import PostgresTarget, create_pool
from services.session.store.postgres.liveness import NAMESPACE, host_of
from tests.conftest import fresh_url
from tests.pg_cluster import Cluster

pytestmark = pytest.mark.timeout(60)

#: A lease no test outlives: only a dead host's lock lets another take its claims.
TTL = 600_000


@pytest.fixture
async def url(pg_cluster: Cluster) -> str:
    return await fresh_url(pg_cluster)


@pytest.fixture
async def stores(url: str) -> AsyncIterator[list[SessionStore]]:
    opened: list[SessionStore] = []
    yield opened
    for store in opened:
        await store.close()


async def _open(url: str, opened: list[SessionStore]) -> SessionStore:
    store = await open_store(PostgresTarget(url, connect_timeout_secs=5))
    opened.append(store)
    return store


async def _cut(url: str, instance_id: str) -> int:
    """End, from the server's side, the connection holding ``instance_id``'s host lock (as
    the server does for a connection whose peer vanished); how many were ended."""
    con = await asyncpg.connect(url)
    try:
        ended = int(await con.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'"
            " AND classid = $1::oid AND objsubid = 2 AND objid = hashtext($2)::oid",
            NAMESPACE, host_of(instance_id)))
    finally:
        await con.close()
    for _ in range(100):  # the backend ends a moment after it is told to
        if not await _holders(url, instance_id):
            break
        await asyncio.sleep(0.02)
    return ended


async def test_a_dead_hosts_claims_are_taken_at_once(url: str,
                                                     stores: list[SessionStore]) -> None:
    """A's claim refuses B while A's service lives; once it is closed (its connection gone)
    B takes the session at once, with a lease far from over, and reads show A's claim
    ended, so nobody is sent to A."""
    a, b = await _open(url, stores), await _open(url, stores)
    await a.create_session(NewSession("s1", "x", "/w", gateway_instance_id="gw-a", host="host-a",
                           claim_ttl_ms=TTL, public_url="ws://a/acp"))
    await a.create_session(NewSession("s2", "x", "/w"))
    await a.claim("s2", "gw-a/w2", ttl_ms=TTL)  # an edge worker of host A
    with pytest.raises(SessionActiveElsewhere):
        await b.claim("s1", "gw-b", ttl_ms=TTL)
    assert (await b.get_session("s1")).claim.until > 0
    assert {r.session_id for r in await b.list_sessions(live=True)} == {"s1", "s2"}

    stores.remove(a)
    await a.close()  # host A's session service is gone: so is its lock

    seen = await b.get_session("s1")
    assert (seen.claim.instance_id, seen.claim.until) == ("gw-a", 0)  # ended, not live
    assert await b.list_sessions(live=True) == []
    taken = await b.claim("s1", "gw-b", ttl_ms=TTL)
    assert (taken.claim.instance_id, taken.claim.generation) == ("gw-b", 2)
    assert (await b.claim("s2", "gw-b/w1", ttl_ms=TTL)).claim.instance_id == "gw-b/w1"
    assert {r.session_id for r in await b.list_sessions(live=True)} == {"s1", "s2"}


async def test_a_cut_off_host_comes_back_fenced(url: str, stores: list[SessionStore],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The server drops A's liveness connection (a partition): B takes A's session; A's
    next heartbeat holds its lock again and keeps its other claim, its write to the session
    B took is refused (the generation fence); on its own A's service retakes the lock too."""
    monkeypatch.setattr(pg_liveness, "KEEP_SECS", 3600.0)  # A's keeper stays out of it
    a, b = await _open(url, stores), await _open(url, stores)
    for sid in ("s1", "s2"):
        await a.create_session(NewSession(sid, "x", "/w", gateway_instance_id="gw-a", claim_ttl_ms=TTL))
    generation = (await a.get_session("s1")).claim.generation
    assert await _cut(url, "gw-a") == 1
    taken = await b.claim("s1", "gw-b", ttl_ms=TTL)
    assert taken.claim.generation == generation + 1
    assert await a.renew_claims("gw-a", ["s1", "s2"], ttl_ms=TTL) == ["s2"]
    assert await _holders(url, "gw-a") == 1
    with pytest.raises(SessionActiveElsewhere):  # A lives again: its other claim is its own
        await b.claim("s2", "gw-b", ttl_ms=TTL)
    with pytest.raises(SessionActiveElsewhere):
        await a.append_turn("s1", [HistoryEntry(role="user", text="late")],
                            holder="gw-a", generation=generation)

    monkeypatch.setattr(pg_liveness, "KEEP_SECS", 0.05)
    c = await _open(url, stores)
    await c.hold_liveness("gw-c")  # its keeper now looks every 50 ms
    assert await _cut(url, "gw-c") == 1
    assert await _eventually_held(url, "gw-c")


async def _eventually_held(url: str, instance_id: str) -> bool:
    """Whether some connection holds ``instance_id``'s host lock within a few seconds."""
    for _ in range(100):
        if await _holders(url, instance_id):
            return True
        await asyncio.sleep(0.1)
    return False


async def _holders(url: str, instance_id: str) -> int:
    """How many connections hold ``instance_id``'s host lock."""
    con = await asyncpg.connect(url)
    try:
        return int(await con.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = $1::oid AND objsubid = 2 AND objid = hashtext($2)::oid",
            NAMESPACE, host_of(instance_id)))
    finally:
        await con.close()


async def test_a_lock_held_elsewhere_keeps_the_lease_rule(url: str,
                                                          stores: list[SessionStore]) -> None:
    """Whoever holds a host's lock (here a second service vouching for the same host) keeps
    that host's claims live: holding a lock only ever delays a takeover to the lease."""
    a, a_twin, b = (await _open(url, stores), await _open(url, stores),
                    await _open(url, stores))
    await a.create_session(NewSession("s1", "x", "/w", gateway_instance_id="gw-a", claim_ttl_ms=TTL))
    await a_twin.hold_liveness("gw-a")  # busy: A holds it; the twin waits its turn
    stores.remove(a)
    await a.close()
    assert await _eventually_held(url, "gw-a")  # the twin has it now
    with pytest.raises(SessionActiveElsewhere):
        await b.claim("s1", "gw-b", ttl_ms=TTL)


async def test_a_host_frozen_mid_transaction_does_not_keep_its_session(
        url: str, stores: list[SessionStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A is cut off while a connection of its pool sits in a transaction that wrote the
    session's row (a host frozen between two statements): the server ends that connection,
    so B's claim, which waits on the row's lock, goes through instead of waiting on A
    forever; A's frozen transaction wrote nothing."""
    monkeypatch.setattr(pg_liveness, "KEEP_SECS", 3600.0)  # A's keeper stays out of it
    monkeypatch.setattr(pg_db, "IDLE_IN_TRANSACTION_SECS", 0.5)
    a, b = await _open(url, stores), await _open(url, stores)
    await a.create_session(NewSession("s1", "x", "/w", gateway_instance_id="gw-a",
                                      claim_ttl_ms=TTL))
    pool = await create_pool(PostgresTarget(url))  # what A's store opens, settings and all
    try:
        frozen = await pool.acquire()
        backend = frozen.get_server_pid()
        await frozen.execute("BEGIN")
        await frozen.execute("UPDATE sessions SET stored_bytes = stored_bytes + 1"
                             " WHERE id = 's1'")
        assert await _cut(url, "gw-a") == 1
        # Bounded only so that a regression fails instead of hanging.
        taken = await asyncio.wait_for(b.claim("s1", "gw-b", ttl_ms=TTL), 30)
        assert taken.claim.instance_id == "gw-b"
        con = await asyncpg.connect(url)
        try:  # the server ended A's frozen connection (its backend exits a moment later)
            for _ in range(100):
                if not await con.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", backend):
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("A's frozen connection was not ended")
        finally:
            await con.close()
    finally:
        pool.terminate()
    assert (await b.get_session("s1")).stored_bytes == 0
