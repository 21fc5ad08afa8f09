"""The reconnect address another host names (-32007 ``liveAt.url``) — attacks.

Two gateway hosts share one PostgreSQL store; a session live on A is answered on B with
A's ``[gateway] public_url``, which its claim records. Written from the attacker's side:

* a client cannot set or spoof the URL other clients are sent: whatever it passes in
  ``session/new``, ``session/attach`` or ``_meta``, or in ``Host`` / ``Forwarded`` /
  ``X-Forwarded-*`` headers, the claim records the operator's configured URL — and none
  on a host without one (a header never makes one up);
* only the install's own edges record a claim's URL: the session service refuses a
  ``ClaimSession`` without the service credential, or with another install's
  (UNAUTHENTICATED, nothing changed), and refuses a token-bearing URL even from its own
  edge (INVALID_ARGUMENT, the value never echoed);
* another token learns nothing: its attach, load and resume of the session on B are
  answered as for an unknown session — no ``liveAt``, no URL, no host name;
* the URL is never a token-bearing string: ``acpgate serve`` refuses to start with one
  that carries userinfo or a query, and its error does not repeat the secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.session.v1 import session_pb2, session_pb2_grpc
from services.common.grpc_auth import GrpcSecurity, open_service_channel
from services.common.protocol import SESSION_LIVE_ELSEWHERE
from tests.gateway.stack import RawClient, Stack, full_stack, select
from tests.gateway.test_two_hosts import client, host_config
from tests.gateway.wsfixtures import free_port, mint
from tests.launches import dial
from tests.security.gateway_stack import ACPGATE, WAIT, gateway_env, write_gateway_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SPOOF = "wss://evil.example.net/acp"
SECRET = "tok_s3cr3t_value"
#: Every place a client could try to name "its" address.
SPOOF_PARAMS = {"publicUrl": SPOOF, "public_url": SPOOF, "url": SPOOF,
                "liveAt": {"url": SPOOF},
                "_meta": {"acpgate": {"publicUrl": SPOOF, "liveAt": {"url": SPOOF},
                                      "url": SPOOF}}}
SPOOF_HEADERS = {"X-Forwarded-Host": "evil.example.net", "X-Forwarded-Proto": "https",
                 "Forwarded": "host=evil.example.net;proto=https",
                 "X-Forwarded-Prefix": "/evil"}


@contextlib.asynccontextmanager
async def spoofing_client(stack: Stack, secret: str) -> AsyncIterator[RawClient]:
    """A client of ``stack`` whose handshake names another address every way it can."""
    async with connect(stack.edge.url, proxy=None, additional_headers={
            "Authorization": f"Bearer {secret}", **SPOOF_HEADERS}) as ws:
        yield RawClient(ws, select("allow-once"))


async def stored_url(stack: Stack, sid: str) -> str:
    row = await stack.runtime.session_service.stub.GetSession(session_pb2.GetSessionRequest(
        session_id=sid))
    return row.claim.public_url


async def refused(call: object) -> str:
    """The status code a call ends with ("OK" when it succeeded)."""
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "OK"


async def test_a_client_cannot_set_the_url_others_are_sent(tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    port_a = free_port()
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    real = f"ws://127.0.0.1:{port_a}/acp"
    cfg_a = replace(cfg_a, gateway=replace(cfg_a.gateway, public_url=real))
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)  # no public_url of its own
    _, secret = mint(cfg_a, "mallory")
    async with full_stack(cfg_a, port=port_a) as a, full_stack(cfg_b) as b:
        async with spoofing_client(a, secret) as on_a:
            sid = (await on_a.result("session/new", SPOOF_PARAMS))["sessionId"]
            assert await stored_url(a, sid) == real
            # A second attach on A (another claim is not taken, nothing re-recorded).
            async with spoofing_client(a, secret) as again:
                await again.result("session/attach", {"sessionId": sid, **SPOOF_PARAMS})
            async with spoofing_client(b, secret) as on_b:
                _, resp = await on_b.call("session/attach", {"sessionId": sid, **SPOOF_PARAMS})
            assert resp["error"]["code"] == SESSION_LIVE_ELSEWHERE, resp
            assert resp["error"]["data"]["acpgate"]["liveAt"]["url"] == real
            assert "evil" not in json.dumps(resp)
            assert await on_a.result("session/close", {"sessionId": sid}) == {}
        # B, with no public_url, serves the session now: its claim names no address, whatever
        # the client's headers and params said.
        async with spoofing_client(b, secret) as on_b:
            _, loaded = await on_b.call("session/load", {"sessionId": sid, "cwd": "/",
                                                         "mcpServers": [], **SPOOF_PARAMS})
            assert "result" in loaded, loaded
            assert await stored_url(b, sid) == ""
            async with spoofing_client(a, secret) as on_a:
                _, resp = await on_a.call("session/attach", {"sessionId": sid})
            assert resp["error"]["code"] == SESSION_LIVE_ELSEWHERE, resp
            assert "url" not in resp["error"]["data"]["acpgate"]["liveAt"]
            assert "evil" not in json.dumps(resp)


async def test_only_the_installs_edges_record_a_claims_url(tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    cfg = host_config(tmp_path, "a", pg_url, token_db)
    cfg = replace(cfg, gateway=replace(cfg.gateway, public_url="wss://a.example.com/acp"))
    _, secret = mint(cfg, "alice")
    async with full_stack(cfg) as a, client(a, secret) as on_a:
        sid = (await on_a.result("session/new", {}))["sessionId"]
        address = a.cfg.services.session_addr
        claim = session_pb2.ClaimSessionRequest(
            session_id=sid, gateway_instance_id=a.runtime.claims.instance_id, host="evil",
            public_url=SPOOF)
        for credential in ("", "another-install-key-" + "0" * 40):
            channel = (open_service_channel(GrpcSecurity(token=credential), address)
                       if credential else grpc.aio.insecure_channel(address))
            try:
                stub = session_pb2_grpc.SessionServiceStub(channel)
                assert await refused(stub.ClaimSession(claim, timeout=10)) == "UNAUTHENTICATED"
            finally:
                await channel.close(None)
        assert await stored_url(a, sid) == "wss://a.example.com/acp"
        # Even the install's own credential cannot record a token-bearing URL.
        channel = dial(a.cfg, address)
        try:
            stub = session_pb2_grpc.SessionServiceStub(channel)
            for bad in (f"wss://u:{SECRET}@a.example.com/acp",
                        f"wss://a.example.com/acp?token={SECRET}"):
                try:
                    await stub.ClaimSession(replace_url(claim, bad), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert SECRET not in (exc.details() or "")
                else:
                    raise AssertionError("a token-bearing URL was recorded")
        finally:
            await channel.close(None)
        assert await stored_url(a, sid) == "wss://a.example.com/acp"


def replace_url(claim: session_pb2.ClaimSessionRequest,
                url: str) -> session_pb2.ClaimSessionRequest:
    out = session_pb2.ClaimSessionRequest()
    out.CopyFrom(claim)
    out.public_url = url
    return out


async def test_another_token_learns_nothing_of_where_a_session_lives(
        tmp_path: Path, pg_url: str) -> None:
    token_db = tmp_path / "shared" / "tokens.db"
    port_a = free_port()
    cfg_a = host_config(tmp_path, "a", pg_url, token_db)
    cfg_a = replace(cfg_a, gateway=replace(cfg_a.gateway,
                                           public_url=f"ws://127.0.0.1:{port_a}/acp"))
    cfg_b = host_config(tmp_path, "b", pg_url, token_db)
    _, secret = mint(cfg_a, "alice")
    _, stranger = mint(cfg_a, "mallory")
    async with full_stack(cfg_a, port=port_a) as a, full_stack(cfg_b) as b:
        async with client(a, secret) as on_a:
            sid = (await on_a.result("session/new", {}))["sessionId"]
            async with client(b, stranger) as other:
                unknown = str(uuid.uuid4())
                for method, extra in (("session/attach", {"role": "observer"}),
                                      ("session/load", {"cwd": "/", "mcpServers": []}),
                                      ("session/resume", {"cwd": "/"})):
                    _, theirs = await other.call(method, {"sessionId": sid, **extra})
                    _, nobody = await other.call(method, {"sessionId": unknown, **extra})
                    assert "error" in theirs, (method, theirs)
                    assert theirs["error"]["code"] == nobody["error"]["code"], method
                    assert theirs["error"]["message"].replace(sid, "?") == \
                        nobody["error"]["message"].replace(unknown, "?"), method
                    text = json.dumps(theirs)
                    assert "liveAt" not in text and a.cfg.gateway.public_url not in text
                    assert a.runtime.claims.instance_id not in text


@pytest.mark.parametrize("url", [f"wss://admin:{SECRET}@a.example.com/acp",
                                 f"https://a.example.com/acp?access_token={SECRET}"])
async def test_serve_refuses_a_token_bearing_public_url(tmp_path: Path, url: str) -> None:
    config_dir = tmp_path / "cfg"
    home = tmp_path / "home"
    home.mkdir()
    write_gateway_config(config_dir, port=free_port(), model_url="http://127.0.0.1:9",
                         gateway=f'public_url = "{url}"\n')
    proc = await asyncio.create_subprocess_exec(
        *ACPGATE, "serve", "--config-dir", str(config_dir), env=gateway_env(home),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode != 0
    text = (out + err).decode(errors="replace")
    assert "[gateway] public_url" in text, text
    assert SECRET not in text
