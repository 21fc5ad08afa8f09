"""Host liveness locks: what a holder of the store's credential can and cannot do with them.

The trust boundary: whoever holds the PostgreSQL credential of the store is trusted
(it can write the rows themselves). Through the liveness locks alone it gains nothing
more: holding a dead host's lock only makes that host look alive — its sessions fail
over by the lease instead, and the impostor holds no claim by it. Clients never reach a
lock key: claim identities come from the edges' configuration, under the service
credential.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.session.store import NewSession, SessionActiveElsewhere, SessionStore, open_store
from services.session.store.postgres.db import PostgresTarget
from services.session.store.postgres.liveness import NAMESPACE
from tests.conftest import fresh_url
from tests.pg_cluster import Cluster

pytestmark = pytest.mark.timeout(60)

TTL = 60_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def url(pg_cluster: Cluster) -> str:
    return await fresh_url(pg_cluster)


@pytest.fixture
async def opened() -> AsyncIterator[list[SessionStore]]:
    stores: list[SessionStore] = []
    yield stores
    for store in stores:
        await store.close()


async def test_an_impostor_holding_a_dead_hosts_lock_only_delays_failover(
        url: str, opened: list[SessionStore]) -> None:
    """A connection with the store's credential takes dead host A's liveness lock: B cannot
    take A's session before the lease ends (A looks alive), then can; the impostor never
    became the session's holder."""
    clock = Clock()
    a = await open_store(PostgresTarget(url), clock=clock)
    b = await open_store(PostgresTarget(url), clock=clock)
    opened.append(b)
    await a.create_session(NewSession("s1", "x", "/w", gateway_instance_id="gw-a", claim_ttl_ms=TTL))
    await a.close()  # host A died
    impostor = await asyncpg.connect(url)
    try:
        assert await impostor.fetchval("SELECT pg_try_advisory_lock($1, hashtext('gw-a'))",
                                       NAMESPACE)
        with pytest.raises(SessionActiveElsewhere):
            await b.claim("s1", "gw-b", ttl_ms=TTL)
        clock.now += TTL + 1  # the lease decides
        rec = await b.claim("s1", "gw-b", ttl_ms=TTL)
        assert rec.claim.instance_id == "gw-b"
    finally:
        await impostor.close()


async def test_a_live_hosts_lock_cannot_be_released_by_another_connection(
        url: str, opened: list[SessionStore]) -> None:
    """Another connection with the store's credential cannot unlock a live host's lock
    (advisory locks are released only by their own session): A's claim stays A's."""
    a = await open_store(PostgresTarget(url))
    b = await open_store(PostgresTarget(url))
    opened += [a, b]
    await a.create_session(NewSession("s1", "x", "/w", gateway_instance_id="gw-a", claim_ttl_ms=TTL))
    other = await asyncpg.connect(url)
    try:
        assert not await other.fetchval("SELECT pg_advisory_unlock($1, hashtext('gw-a'))",
                                        NAMESPACE)
        assert not await other.fetchval("SELECT pg_try_advisory_lock($1, hashtext('gw-a'))",
                                        NAMESPACE)
    finally:
        await other.close()
    with pytest.raises(SessionActiveElsewhere):
        await b.claim("s1", "gw-b", ttl_ms=TTL)
