"""The Streamable HTTP side of ``/acp`` from the attacker's side (ACP remote transport).

A new way in holds new identifiers — ``Acp-Connection-Id`` and ``Acp-Session-Id`` —
and takes browsers' requests. Against a real ``acpgate serve`` (uvloop edge, real
tokens minted and revoked by the CLI):

- another token's connection id, and another token's session id, are answered
  exactly like ids that do not exist (status and body), and reach nothing;
- a page of another site (a browser's ``Origin``) is refused before anything
  happens, on HTTP and WebSocket alike, with no CORS header to read an answer by;
- a connection id is never usable without the token that made it: no token is
  401, a revoked token's connections are closed (and its requests 401);
- what a client can make the edge hold is bounded: a resume asks for at most the
  replay buffer, a second reader replaces the first, a client that reads nothing
  while it floods requests is closed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from services.edge.transport.streamable.streams import REPLAY_EVENTS
from tests.gateway.streamable_client import RemoteClient
from tests.security.gateway_stack import WAIT, Gateway, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.port}/acp"


def _req(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


async def _answers(client: RemoteClient, session: str | None = None) -> list[tuple[int, str]]:
    """POST, GET and DELETE with the client's ids: (status, body) each."""
    out = []
    for r in (await client.post(_req("session/list")), await client.get(session=session),
              await client.delete()):
        out.append((r.status_code, r.text))
    return out


async def test_another_tokens_ids_are_answered_like_unknown_ones(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        victim_token, attacker_token = await gw.token("victim"), await gw.token("attacker")
        victim = RemoteClient(_url(gw), victim_token.secret)
        attacker = RemoteClient(_url(gw), attacker_token.secret)
        try:
            await victim.initialize()
            async with victim.stream() as victim_stream:
                await victim.post(_req("session/new", {"agentAlias": "demo"}, 1))
                sid = (await victim_stream.next()).data["result"]["sessionId"]
                # The victim's connection id under another token, and a made-up one.
                attacker.connection_id = str(uuid.uuid4())
                unknown = await _answers(attacker)
                attacker.connection_id = victim.connection_id
                assert await _answers(attacker) == unknown
                assert {status for status, _ in unknown} == {404}
                # The victim's connection is untouched by any of it.
                assert (await victim.post(_req("session/list", {}, 2))).status_code == 202
                assert (await victim_stream.next()).data["id"] == 2
            # On the attacker's own connection, the victim's session id is unknown too.
            await attacker.initialize()
            async with attacker.stream() as stream:
                ghost = str(uuid.uuid4())
                for name in (ghost, sid):
                    r = await attacker.get(session=name)
                    assert (r.status_code, r.text) == (404, "Unknown Acp-Session-Id\n")
                    r = await attacker.post(_req("session/prompt", {"sessionId": name,
                                                                     "prompt": "hi"}), session=name)
                    assert (r.status_code, r.text) == (404, "Unknown Acp-Session-Id\n")
                # Loading it (no header: the dialect decides) is "not found", as a ghost's.
                errors = []
                for rid, name in ((10, ghost), (11, sid)):
                    assert (await attacker.post(_req("session/load", {
                        "sessionId": name, "cwd": "/", "mcpServers": []}, rid))).status_code == 202
                    answer = (await stream.next()).data
                    assert answer["id"] == rid
                    errors.append(answer["error"]["code"])
                assert errors == [-32000, -32000]
        finally:
            await victim.aclose()
            await attacker.aclose()


async def test_a_cross_site_page_is_refused(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("user")
        good = RemoteClient(_url(gw), token.secret)
        page = RemoteClient(_url(gw), token.secret, headers={"Origin": "https://evil.example"})
        try:
            await good.initialize()
            # A valid token does not help a page of another site: nothing is opened for it.
            for origin in ("https://evil.example", "null", f"http://127.0.0.1:{gw.port}"):
                page.headers["Origin"] = origin
                page.connection_id = None
                r = await page.post(_req("initialize", {"protocolVersion": 1}, 0))
                assert r.status_code == 403
                assert not any(k.startswith("access-control-") for k in r.headers)
                page.connection_id = good.connection_id  # even with a live connection's id
                assert (await page.get()).status_code == 403
                assert (await page.post(_req("session/list"))).status_code == 403
                r = await page.http.options(_url(gw), headers={
                    "Origin": origin, "Access-Control-Request-Method": "POST"})
                assert r.status_code == 403
            with pytest.raises(InvalidStatus) as refused:
                await gw.connect(token, origin="https://evil.example")  # type: ignore[arg-type]
            assert refused.value.response.status_code == 403
            metrics = await gw.metrics()
            assert metrics["acpgate_http_connections_total"] == 1  # only the good client's
            assert (await good.delete()).status_code == 202
        finally:
            await good.aclose()
            await page.aclose()


async def test_a_connection_id_needs_the_token_that_made_it(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("doomed")
        owner = RemoteClient(_url(gw), token.secret)
        anonymous = RemoteClient(_url(gw))
        try:
            await owner.initialize()
            anonymous.connection_id = owner.connection_id
            assert [s for s, _ in await _answers(anonymous)] == [401, 401, 401]
            async with owner.stream() as stream:
                await gw.revoke(token)
                # The revoked token's connection is closed: its stream ends …
                with pytest.raises(EOFError):
                    await asyncio.wait_for(stream.next(), WAIT)
            # … and nothing of it answers that token any more.
            assert [s for s, _ in await _answers(owner)] == [401, 401, 401]
            metrics = await gw.metrics()
            assert metrics["acpgate_http_connections"] == 0
            assert metrics["acpgate_ws_revoked_closes_total"] == 1
        finally:
            await owner.aclose()
            await anonymous.aclose()


async def test_what_a_client_can_make_the_edge_hold_is_bounded(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("greedy")
        c = RemoteClient(_url(gw), token.secret)
        try:
            await c.initialize()
            # More answers than the replay buffer keeps, all written to a reader.
            async with c.stream() as stream:
                for rid in range(1, REPLAY_EVENTS + 101):
                    assert (await c.post(_req("nope/x", {}, rid))).status_code == 202
                await stream.until(lambda d: d.get("id") == REPLAY_EVENTS + 100)
            # A resume from the very start gets the gap and at most the buffer, not all.
            assert (await c.post(_req("nope/x", {}, "last"))).status_code == 202
            async with c.stream(last_event_id="0") as stream:
                replayed = await stream.until(lambda d: d.get("id") == "last")
            assert replayed[0].event == "error"
            assert len(replayed) <= REPLAY_EVENTS + 2
            # Ids the stream never sent are refused, however large.
            for bad in ("99999999999999999999", "-1", "x"):
                assert (await c.get(**{"Last-Event-ID": bad})).status_code == 400
            # Readers of one stream do not pile up: each new one replaces the last.
            async with c.stream() as old, c.stream() as new:
                with pytest.raises(EOFError):
                    await asyncio.wait_for(old.next(), WAIT)
                assert (await c.post(_req("nope/x", {}, "after"))).status_code == 202
                assert (await new.next()).data["id"] == "after"
        finally:
            await c.aclose()


async def test_a_client_that_floods_and_reads_nothing_is_closed(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        token = await gw.token("flood")
        c = RemoteClient(_url(gw), token.secret)
        try:
            await c.initialize()
            statuses = set()
            for rid in range(1, 3000):  # answers nobody reads: the budget runs out
                status = (await c.post(_req("nope/x", {}, rid))).status_code
                statuses.add(status)
                if status == 404:
                    break
            assert 404 in statuses, "the connection was closed"
            metrics = await gw.metrics()
            assert metrics["acpgate_http_slow_client_closes_total"] == 1
            assert metrics["acpgate_http_connections"] == 0
            assert any(e.get("event") == "http_slow_client" for e in gw.events())
        finally:
            await c.aclose()
