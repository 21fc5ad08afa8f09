"""Claim generations fence a holder's writes, on every backend.

Each claim taken is the row's next generation (a renewal keeps it). A holder's
turn, row update and release carry the generation it got and are refused —
SessionActiveElsewhere, nothing written — unless the row's claim is still that
instance's at that generation, decided in the write's own transaction: a host cut
off past its lease can never write after the host that took the session over.
"""

from __future__ import annotations

import asyncio

import pytest

from services.session.store import HistoryEntry, NewSession, SessionActiveElsewhere, SessionStore
from tests.session.conftest import Backend, FakeClock

TTL = 30_000
TURN = [HistoryEntry(role="user", text="late turn"), HistoryEntry(role="assistant", text="ok")]


async def _snapshot(store: SessionStore, sid: str) -> tuple[object, ...]:
    rec = await store.get_session(sid)
    items = [e async for e in store.iter_history(sid)]
    return (rec.message_count, rec.token_count, rec.title, rec.stored_bytes, rec.plan_json,
            rec.state, rec.mode_id, len(items))


async def test_generations_count_claims_taken_not_renewals(backend: Backend) -> None:
    """Created claimed: generation 1; a renewal keeps it; each claim taken — by the same
    instance again, or a takeover after expiry — is the next one."""
    clock = FakeClock(1_000_000)
    store = await backend.open(clock)
    rec = await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a",
                                     claim_ttl_ms=TTL))
    assert rec.claim.generation == 1
    assert (await store.create_session(NewSession("s2", "a", "/w"))).claim.generation == 0
    clock.now += 1_000
    assert await store.renew_claims("gw-a", ["s1"], ttl_ms=TTL) == ["s1"]
    assert (await store.get_session("s1")).claim.generation == 1
    assert (await store.claim("s1", "gw-a", ttl_ms=TTL)).claim.generation == 2
    clock.now += 2 * TTL  # gw-a stopped renewing
    taken = await store.claim("s1", "gw-b", ttl_ms=TTL)
    assert (taken.claim.instance_id, taken.claim.generation) == ("gw-b", 3)
    assert await store.release_claim("s1", "gw-b", 3)
    assert (await store.claim("s1", "gw-a", ttl_ms=TTL)).claim.generation == 4


async def test_a_stale_holder_writes_nothing(backend: Backend) -> None:
    """Host A holds generation g; its claim expires and B takes the session. A's turn, its
    row update and its release, each carrying g, are refused and change nothing; B's
    writes at its generation go through."""
    clock = FakeClock(1_000_000)
    store = await backend.open(clock)
    rec = await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a",
                                     claim_ttl_ms=TTL))
    g_a = rec.claim.generation
    await store.append_turn("s1", [HistoryEntry(role="user", text="first")],
                            holder="gw-a", generation=g_a)
    clock.now += TTL + 1
    g_b = (await store.claim("s1", "gw-b", ttl_ms=TTL)).claim.generation
    before = await _snapshot(store, "s1")

    with pytest.raises(SessionActiveElsewhere) as refused:
        await store.append_turn("s1", TURN, token_delta=5, plan_json="[]",
                                holder="gw-a", generation=g_a)
    assert (refused.value.claim.instance_id, refused.value.claim.generation) == ("gw-b", g_b)
    with pytest.raises(SessionActiveElsewhere):
        await store.update_session("s1", state="inactive", mode_id="full",
                                   holder="gw-a", generation=g_a)
    assert not await store.release_claim("s1", "gw-a", g_a)
    assert await _snapshot(store, "s1") == before
    assert (await store.get_session("s1")).claim.instance_id == "gw-b"

    await store.append_turn("s1", TURN, holder="gw-b", generation=g_b)
    assert (await store.update_session("s1", mode_id="full", holder="gw-b",
                                       generation=g_b)).mode_id == "full"
    assert [e.text async for e in store.iter_history("s1")] == ["first", "late turn", "ok"]


async def test_the_same_host_claiming_again_fences_its_older_generation(backend: Backend) -> None:
    """A claim taken again by the same instance (a new restore there) is a new generation:
    writes of the one before are refused, even without any other host involved."""
    store = await backend.open(FakeClock())
    old = (await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a",
                                      claim_ttl_ms=TTL))).claim.generation
    new = (await store.claim("s1", "gw-a", ttl_ms=TTL)).claim.generation
    with pytest.raises(SessionActiveElsewhere):
        await store.append_turn("s1", TURN, holder="gw-a", generation=old)
    await store.append_turn("s1", TURN, holder="gw-a", generation=new)
    assert (await store.get_session("s1")).message_count == 2


async def test_a_released_claim_takes_no_fenced_write(backend: Backend) -> None:
    """Once the claim is dropped, the old holder's generation no longer writes the row (an
    unfenced write, holder without generation, keeps the older rule: own claim or none)."""
    store = await backend.open(FakeClock())
    g = (await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a",
                                     claim_ttl_ms=TTL))).claim.generation
    assert await store.release_claim("s1", "gw-a", g)
    with pytest.raises(SessionActiveElsewhere):
        await store.append_turn("s1", TURN, holder="gw-a", generation=g)
    await store.append_turn("s1", TURN, holder="gw-a")
    assert (await store.get_session("s1")).message_count == 2


async def test_a_stale_turn_racing_the_takeover_is_all_or_nothing(backend: Backend) -> None:
    """Host A's turn and host B's takeover race, from two stores on one database (two
    connections, as two hosts' session services): either the turn committed before the
    takeover (all its items are there) or it was refused (none are); after the takeover
    every write of A's generation is refused."""
    clock = FakeClock(1_000_000)
    host_a = await backend.open(clock)
    host_b = await backend.open(clock)
    for n in range(12):
        sid = f"race-{n}"
        g_a = (await host_a.create_session(NewSession(sid, "a", "/w", gateway_instance_id="gw-a",
                                           claim_ttl_ms=TTL))).claim.generation
        clock.now += TTL + 1
        turn = asyncio.ensure_future(host_a.append_turn(sid, TURN, holder="gw-a",
                                                        generation=g_a))
        takeover = asyncio.ensure_future(host_b.claim(sid, "gw-b", ttl_ms=TTL))
        await asyncio.wait({turn, takeover})
        assert takeover.result().claim.instance_id == "gw-b"
        stored = await host_b.get_session(sid)
        if turn.exception() is None:
            assert stored.message_count == len(TURN)
        else:
            assert isinstance(turn.exception(), SessionActiveElsewhere)
            assert (stored.message_count, stored.stored_bytes) == (0, 0)
        with pytest.raises(SessionActiveElsewhere):
            await host_a.append_turn(sid, TURN, holder="gw-a", generation=g_a)
        assert (await host_b.get_session(sid)).message_count == stored.message_count
