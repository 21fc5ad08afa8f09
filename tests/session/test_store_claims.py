"""Claims: which gateway instance serves a session when several hosts share one store.

Runs on every backend (``backend`` / ``store`` fixtures). The rules: a free,
own or expired claim can be taken, a live one of another instance cannot
(SessionActiveElsewhere, the SPEC §8 "Session already active" message); the
holder renews its claims; releasing marks the row inactive, never another's;
and of several instances racing for one session exactly one wins.
"""

from __future__ import annotations

import asyncio

import pytest

from services.common.protocol import MSG_SESSION_ALREADY_ACTIVE
from services.session.store import (
    InvalidItem,
    NewSession,
    SessionActiveElsewhere,
    SessionNotFound,
    SessionStore,
)
from tests.session.conftest import Backend, FakeClock

TTL = 30_000


async def test_claim_free_own_expired_and_live(backend: Backend) -> None:
    """Free → taken; own → renewed; another's live claim → refused; expired → taken over."""
    clock = FakeClock(1_000_000)
    store = await backend.open(clock)
    await store.create_session(NewSession("s1", "a", "/w"))
    assert (await store.get_session("s1")).claim.instance_id == ""
    rec = await store.claim("s1", "gw-a", host="host-a", ttl_ms=TTL)
    assert (rec.claim.instance_id, rec.claim.host, rec.claim.until) == ("gw-a", "host-a", 1_030_000)
    assert rec.claim.live(clock.now)
    clock.now += 10_000
    assert (await store.claim("s1", "gw-a", host="host-a", ttl_ms=TTL)).claim.until == 1_040_000
    with pytest.raises(SessionActiveElsewhere) as info:
        await store.claim("s1", "gw-b", host="host-b", ttl_ms=TTL)
    assert str(info.value) == MSG_SESSION_ALREADY_ACTIVE.format(session_id="s1")
    assert info.value.claim.instance_id == "gw-a" and info.value.claim.host == "host-a"
    clock.now = 1_040_000  # the last moment of the claim: still live
    with pytest.raises(SessionActiveElsewhere):
        await store.claim("s1", "gw-b", ttl_ms=TTL)
    clock.now += 1  # host A stopped renewing: the claim has expired
    assert not (await store.get_session("s1")).claim.live(clock.now)
    rec = await store.claim("s1", "gw-b", host="host-b", ttl_ms=TTL)
    assert (rec.claim.instance_id, rec.claim.until) == ("gw-b", clock.now + TTL)
    with pytest.raises(SessionNotFound):
        await store.claim("nope", "gw-a", ttl_ms=TTL)
    for instance, ttl in (("", TTL), ("gw-a", 0), ("gw\x00", TTL)):
        with pytest.raises(InvalidItem):
            await store.claim("s1", instance, ttl_ms=ttl)


async def test_renew_and_release(backend: Backend) -> None:
    """The heartbeat renews only what the instance still holds; release never touches a row
    another instance holds."""
    clock = FakeClock(5_000)
    store = await backend.open(clock)
    for sid in ("s1", "s2", "s3"):
        await store.create_session(NewSession(sid, "a", "/w"))
    await store.claim("s1", "gw-a", ttl_ms=TTL)
    await store.claim("s2", "gw-a", ttl_ms=TTL)
    await store.claim("s3", "gw-b", ttl_ms=TTL)
    clock.now += 20_000
    held = await store.renew_claims("gw-a", ["s1", "s2", "s3", "missing", "s1"], ttl_ms=TTL)
    assert held == ["s1", "s2"]
    assert (await store.get_session("s1")).claim.until == clock.now + TTL
    assert (await store.get_session("s3")).claim.until == 5_000 + TTL  # gw-b's: untouched
    assert await store.renew_claims("gw-a", [], ttl_ms=TTL) == []
    # An expired claim nobody took over is still its holder's to renew.
    clock.now += 2 * TTL
    assert await store.renew_claims("gw-b", ["s3"], ttl_ms=TTL) == ["s3"]

    assert await store.release_claim("s1", "gw-a")
    rec = await store.get_session("s1")
    assert rec.state == "inactive" and rec.claim.instance_id == "" and rec.claim.until == 0
    assert not await store.release_claim("s3", "gw-a")  # gw-b's session stays active
    rec = await store.get_session("s3")
    assert rec.state == "active" and rec.claim.instance_id == "gw-b"
    assert await store.release_claim("s1", "gw-b")  # nobody's claim: anyone may mark it
    assert not await store.release_claim("missing", "gw-a")
    # After a release the session is free for every instance.
    assert (await store.claim("s1", "gw-b", ttl_ms=TTL)).claim.instance_id == "gw-b"


async def test_update_with_holder_is_refused_on_another_claim(store: SessionStore) -> None:
    """An update guarded by ``holder`` changes nothing while another instance holds the row."""
    await store.create_session(NewSession("s1", "a", "/w"))
    rec = await store.update_session("s1", lease_id="L0", holder="gw-a")  # unclaimed: fine
    assert rec.lease_id == "L0"
    await store.claim("s1", "gw-b", ttl_ms=TTL)
    with pytest.raises(SessionActiveElsewhere):
        await store.update_session("s1", state="active", lease_id="L1", holder="gw-a")
    assert (await store.get_session("s1")).lease_id == "L0"
    rec = await store.update_session("s1", state="active", lease_id="L2", holder="gw-b")
    assert rec.lease_id == "L2"
    assert (await store.update_session("s1", lease_id="L3")).lease_id == "L3"  # unguarded
    with pytest.raises(SessionNotFound):
        await store.update_session("nope", lease_id="x", holder="gw-a")


async def test_concurrent_claims_exactly_one_wins(backend: Backend) -> None:
    """Hosts racing to load one session: each has its own connection and instance id, all
    claim at once; exactly one wins, every other sees the winner's live claim. Repeated on
    fresh sessions so the race is run, not just once lucky."""
    hosts = 6
    stores = [await backend.open(FakeClock()) for _ in range(hosts)]
    for round_no in range(8):
        sid = f"race-{round_no}"
        await stores[0].create_session(NewSession(sid, "a", "/w", state="inactive"))

        async def load(i: int, sid: str = sid) -> str:
            try:
                await stores[i].claim(sid, f"gw-{i}", host=f"host-{i}", ttl_ms=TTL)
            except SessionActiveElsewhere as exc:
                return f"lost to {exc.claim.instance_id}"
            return "won"

        outcomes = await asyncio.gather(*(load(i) for i in range(hosts)))
        winners = [i for i, o in enumerate(outcomes) if o == "won"]
        assert len(winners) == 1, outcomes
        winner = f"gw-{winners[0]}"
        assert all(o == f"lost to {winner}" for o in outcomes if o != "won"), outcomes
        assert (await stores[hosts - 1].get_session(sid)).claim.instance_id == winner


async def test_create_claimed_and_titled_in_one_write(backend: Backend) -> None:
    """A row created with a claim holds it from its first write, as a claim would have
    taken it, and its title as an update would have set it; a claim the store refuses
    leaves no row behind, and a claimed new row is not free for another instance."""
    clock = FakeClock(2_000)
    store = await backend.open(clock)
    rec = await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a", host="h-a",
                                     claim_ttl_ms=TTL, title="  fix   the\nbuild  "))
    assert (rec.claim.instance_id, rec.claim.host, rec.claim.until) == ("gw-a", "h-a", 32_000)
    assert rec.title == "fix the build"
    assert await store.get_session("s1") == rec
    with pytest.raises(SessionActiveElsewhere):
        await store.claim("s1", "gw-b", ttl_ms=TTL)
    assert (await store.create_session(NewSession("s2", "a", "/w", gateway_instance_id="gw-a",
                                       title=" "))).claim.instance_id == ""
    for instance, host, ttl in (("", "", TTL), ("gw-a", "", 0), ("gw-a", "h\x00", TTL)):
        with pytest.raises(InvalidItem):
            await store.create_session(NewSession("s3", "a", "/w", gateway_instance_id=instance,
                                       host=host, claim_ttl_ms=ttl))
        with pytest.raises(SessionNotFound):
            await store.get_session("s3")
