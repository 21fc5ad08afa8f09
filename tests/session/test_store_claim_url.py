"""A claim records its holder's public URL (across hosts), on every backend.

Whoever takes a session's claim — created claimed, ``claim``, a takeover after expiry,
a fork — records the ``[gateway] public_url`` its edge sent; another host reads it from
the row to tell a client where to reconnect. A release forgets it with the claim; a
renewal keeps it. A URL that could carry a credential (userinfo, a query) or is not a
ws/wss/http/https address is refused like any bad claim (InvalidItem, nothing written).
"""

from __future__ import annotations

import pytest

from services.session.store import InvalidItem, NewSession
from tests.session.conftest import Backend, FakeClock

TTL = 30_000
URL_A = "wss://a.example.com/acp"
URL_B = "https://b.example.com:8443/gw/acp"


async def test_every_claim_taken_records_its_holders_url(backend: Backend) -> None:
    clock = FakeClock(1_000_000)
    store = await backend.open(clock)
    rec = await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a",
                                     host="a", claim_ttl_ms=TTL, public_url=URL_A))
    assert rec.claim.public_url == URL_A
    assert (await store.get_session("s1")).claim.public_url == URL_A
    assert await store.renew_claims("gw-a", ["s1"], ttl_ms=TTL) == ["s1"]
    assert (await store.get_session("s1")).claim.public_url == URL_A
    clock.now += 2 * TTL  # A stopped renewing: B takes it over, with its own URL
    taken = await store.claim("s1", "gw-b", host="b", ttl_ms=TTL, public_url=URL_B)
    assert (taken.claim.instance_id, taken.claim.public_url) == ("gw-b", URL_B)
    assert await store.release_claim("s1", "gw-b", taken.claim.generation)
    assert (await store.get_session("s1")).claim.public_url == ""  # nobody's: no address
    # A holder without one configured records none (never a stale one of another host).
    await store.claim("s1", "gw-a", host="a", ttl_ms=TTL, public_url=URL_A)
    assert await store.release_claim("s1", "gw-a")
    assert (await store.claim("s1", "gw-c", host="c", ttl_ms=TTL)).claim.public_url == ""
    fork = await store.fork_session("s1", "f1", agent_alias="a", gateway_instance_id="gw-b",
                                    host="b", claim_ttl_ms=TTL, public_url=URL_B)
    assert fork.claim.public_url == URL_B
    assert (await store.get_session("f1")).claim.public_url == URL_B


@pytest.mark.parametrize("url", [
    "wss://alice:secret@a.example.com/acp",  # userinfo: a credential sent to every client
    "wss://token@a.example.com/acp",
    "https://a.example.com/acp?token=secret",  # a query: the same
    "https://a.example.com/acp#frag",
    "ftp://a.example.com/acp",
    "file:///etc/passwd",
    "wss:///acp",  # no host
    "wss://a.example.com/ acp",
    "javascript:alert(1)",
])
async def test_a_url_that_could_carry_a_secret_is_refused(backend: Backend, url: str) -> None:
    store = await backend.open(FakeClock(1_000_000))
    with pytest.raises(InvalidItem):
        await store.create_session(NewSession("s1", "a", "/w", gateway_instance_id="gw-a",
                                   claim_ttl_ms=TTL, public_url=url))
    await store.create_session(NewSession("s1", "a", "/w"))
    with pytest.raises(InvalidItem):
        await store.claim("s1", "gw-a", ttl_ms=TTL, public_url=url)
    rec = await store.get_session("s1")
    assert (rec.claim.instance_id, rec.claim.public_url) == ("", "")
