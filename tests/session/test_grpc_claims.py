"""Claims over gRPC: several hosts' session services on one store (SPEC §8, §13).

Real session servers on real sockets, on each store backend. CreateSession and
ClaimSession take a session's claim for a gateway instance; another
instance's live claim is ABORTED with SPEC §8's "Session already active"
message; RenewClaims is the heartbeat; ReleaseSession never touches another
instance's session; two servers racing ClaimSession on one database: exactly
one wins. And a PostgreSQL server that goes away is UNAVAILABLE, never a
password in a message or a log.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import StoreSection
from services.common.logs import JsonFormatter
from services.common.protocol import MSG_SESSION_ALREADY_ACTIVE
from tests.pg_cluster import running_cluster
from tests.session.conftest import make_cfg
from tests.session.test_grpc import _code

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub
    from tests.session.conftest import ServerFactory


async def test_claim_renew_release_over_grpc(store_stub: Stub) -> None:
    """The claim RPCs and their refusals, with the exact SPEC §8 message."""
    row = await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id="s1", agent_alias="alpha", workspace_dir="/w", gateway_instance_id="gw-a",
        host="host-a"))
    assert (row.claim.instance_id, row.claim.host) == ("gw-a", "host-a")
    assert row.claim.until >= row.created_at + 30_000
    unclaimed = await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id="s2", agent_alias="alpha", workspace_dir="/w"))
    assert unclaimed.claim.instance_id == ""

    assert await _code(store_stub.ClaimSession(pb.ClaimSessionRequest(
        session_id="s1", gateway_instance_id="gw-b", host="host-b"))) == (
        grpc.StatusCode.ABORTED, MSG_SESSION_ALREADY_ACTIVE.format(session_id="s1"))
    again = await store_stub.ClaimSession(pb.ClaimSessionRequest(
        session_id="s1", gateway_instance_id="gw-a", host="host-a"))
    assert again.claim.until >= row.claim.until
    for request, code in (
        (pb.ClaimSessionRequest(session_id="zz", gateway_instance_id="gw-a"),
         grpc.StatusCode.NOT_FOUND),
        (pb.ClaimSessionRequest(session_id="s2"), grpc.StatusCode.INVALID_ARGUMENT),
        (pb.ClaimSessionRequest(gateway_instance_id="gw-a"), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        assert (await _code(store_stub.ClaimSession(request)))[0] == code

    beat = await store_stub.RenewClaims(pb.RenewClaimsRequest(
        gateway_instance_id="gw-a", session_ids=["s1", "s2", "zz"]))
    assert (list(beat.held), list(beat.lost)) == (["s1"], ["s2", "zz"])

    code, details = await _code(store_stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="s1", lease_id="L-b", holder_instance_id="gw-b")))
    assert (code, details) == (grpc.StatusCode.ABORTED,
                               MSG_SESSION_ALREADY_ACTIVE.format(session_id="s1"))
    ok = await store_stub.UpdateSession(pb.UpdateSessionRequest(
        session_id="s1", lease_id="L-a", state=pb.SESSION_STATE_ACTIVE,
        holder_instance_id="gw-a"))
    assert ok.lease_id == "L-a"

    assert not (await store_stub.ReleaseSession(pb.ReleaseSessionRequest(
        session_id="s1", gateway_instance_id="gw-b"))).released
    assert (await store_stub.GetSession(pb.GetSessionRequest(session_id="s1"))).state == (
        pb.SESSION_STATE_ACTIVE)
    assert (await store_stub.ReleaseSession(pb.ReleaseSessionRequest(
        session_id="s1", gateway_instance_id="gw-a"))).released
    gone = await store_stub.GetSession(pb.GetSessionRequest(session_id="s1"))
    assert gone.state == pb.SESSION_STATE_INACTIVE and gone.claim.instance_id == ""
    taken = await store_stub.ClaimSession(pb.ClaimSessionRequest(
        session_id="s1", gateway_instance_id="gw-b", host="host-b"))
    assert taken.claim.instance_id == "gw-b"


async def test_the_claim_carries_the_claiming_edges_public_url(store_stub: Stub) -> None:
    """CreateSession and ClaimSession record the edge's ``public_url`` in the claim,
    and the row reports it; one that could carry a secret is INVALID_ARGUMENT, the
    value never echoed, nothing written."""
    row = await store_stub.CreateSession(pb.CreateSessionRequest(
        session_id="s1", agent_alias="alpha", workspace_dir="/w", gateway_instance_id="gw-a",
        host="host-a", public_url="wss://a.example.com/acp"))
    assert row.claim.public_url == "wss://a.example.com/acp"
    got = await store_stub.GetSession(pb.GetSessionRequest(session_id="s1"))
    assert got.claim.public_url == "wss://a.example.com/acp"
    secret = "hunter2"
    for bad in (f"wss://u:{secret}@a.example.com/acp", f"https://a.example.com/acp?t={secret}"):
        code, details = await _code(store_stub.CreateSession(pb.CreateSessionRequest(
            session_id="s2", agent_alias="alpha", workspace_dir="/w",
            gateway_instance_id="gw-a", public_url=bad)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and secret not in details, details
        code, details = await _code(store_stub.ClaimSession(pb.ClaimSessionRequest(
            session_id="s1", gateway_instance_id="gw-a", public_url=bad)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and secret not in details, details
    assert (await store_stub.GetSession(pb.GetSessionRequest(session_id="s1"))
            ).claim.public_url == "wss://a.example.com/acp"
    assert (await _code(store_stub.GetSession(pb.GetSessionRequest(session_id="s2"))))[0] == \
        grpc.StatusCode.NOT_FOUND


async def test_two_servers_race_one_session(serve: ServerFactory, short_dir: Path,
                                            store_section: StoreSection) -> None:
    """Two session services (two hosts) on one database; both claim each session at the
    same moment for their own instance: exactly one ClaimSession succeeds each time."""
    cfg_a = make_cfg(short_dir / "a", store=store_section)
    cfg_b = make_cfg(short_dir / "b", store=store_section)
    if not store_section.url:  # SQLite: one file both servers open
        cfg_b = make_cfg(short_dir / "a", store=store_section)
    _, a = await serve(cfg_a)
    _, b = await serve(cfg_b)
    for n in range(10):
        sid = f"race-{n}"
        await a.CreateSession(pb.CreateSessionRequest(session_id=sid, agent_alias="alpha",
                                                      workspace_dir="/w"))

        async def claim(stub: Stub, instance: str, sid: str = sid) -> str:
            try:
                await stub.ClaimSession(pb.ClaimSessionRequest(
                    session_id=sid, gateway_instance_id=instance))
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.ABORTED, exc.details()
                return "lost"
            return instance

        outcomes = await asyncio.gather(claim(a, "gw-a"), claim(b, "gw-b"))
        winners = [o for o in outcomes if o != "lost"]
        assert len(winners) == 1, outcomes
        row = await b.GetSession(pb.GetSessionRequest(session_id=sid))
        assert row.claim.instance_id == winners[0]


async def test_postgres_gone_is_unavailable_and_no_password_leaks(
    serve: ServerFactory, short_dir: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session service on a PostgreSQL server over TCP, password from ``[store]
    password_env``: it works; the server stops; every RPC that needs the database is
    UNAVAILABLE with the URL shown without its password, and no log line has it; an
    agent still resolves (without its recorded adapter capabilities)."""
    caplog.set_level(logging.INFO, logger="acpgate")
    with running_cluster() as cluster:
        monkeypatch.setenv("ACPG_TEST_STORE_PASSWORD", cluster.password)
        store = StoreSection(url=cluster.dsn("postgres", tcp=True),
                             password_env="ACPG_TEST_STORE_PASSWORD", connect_timeout_secs=5)
        _, stub = await serve(make_cfg(short_dir, store=store))
        status = await stub.GetStoreStatus(pb.GetStoreStatusRequest())
        assert status.persistent and status.backend == "postgresql", status.fallback_reason
        await stub.CreateSession(pb.CreateSessionRequest(session_id="s", agent_alias="alpha",
                                                         workspace_dir="/w"))
        await asyncio.to_thread(cluster.stop)
        for call in (stub.GetSession(pb.GetSessionRequest(session_id="s")),
                     stub.ClaimSession(pb.ClaimSessionRequest(session_id="s",
                                                              gateway_instance_id="gw"))):
            code, details = await _code(call)
            assert code == grpc.StatusCode.UNAVAILABLE, details
            assert "unavailable" in details and f"127.0.0.1:{cluster.port}" in details
            assert cluster.password not in details
        # Resolving an agent needs no database: only its recorded capabilities are missing.
        agent = await stub.ResolveAgent(pb.ResolveAgentRequest(explicit_alias="alpha"))
        assert agent.default_model == "demo/demo" and agent.adapter_capabilities_json == ""
        code, details = await _code(stub.RecordAgentCapabilities(
            pb.RecordAgentCapabilitiesRequest(alias="alpha", capabilities_json="{}")))
        assert code == grpc.StatusCode.UNAVAILABLE and cluster.password not in details
    lines = [JsonFormatter().format(r) for r in caplog.records]
    assert any("session_store_unavailable" in line for line in lines)
    assert any("session_store_opened" in line for line in lines)
    assert not [line for line in lines if cluster.password in line]
