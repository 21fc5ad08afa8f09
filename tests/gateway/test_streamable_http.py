"""Streamable HTTP on ``/acp`` as the ACP RFD routes it: every status, every stream.

A scripted dialect (``script_dialect.py``) stands in for the edge's, so each test
sees exactly where the transport put each message; real sockets, a real token
store, real gRPC health stand-ins. The official SDK clients run against the full
stack in ``test_py_sdk_remote.py`` and ``test_ts_sdk_remote.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from services.edge.caller import Caller
from services.edge.transport.ws_server import EdgeServer

from .script_dialect import ScriptDialect
from .streamable_client import RemoteClient
from .wsfixtures import FakeRuntime, mint, running_edge, stand_in_services, write_config

pytestmark = pytest.mark.timeout(60)

STORED = "stored-1"  # the one stored session the stand-in lookup knows (for principal "a")


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    async with stand_in_services(tmp_path, [lifecycle_pb2.LEASE_STATE_OPEN]) as addrs:
        yield addrs


async def knows(caller: Caller, sid: str) -> bool:
    """The stand-in store: ``STORED`` exists, and is visible to every caller of the test."""
    return sid == STORED


def req(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if rid is not None:
        msg["id"] = rid
    return msg


class Gateway:
    """A running EdgeServer with the scripted dialect, and a token for it."""

    def __init__(self, edge: EdgeServer, token: str, dialect: ScriptDialect) -> None:
        self.edge, self.token, self.dialect = edge, token, dialect

    def client(self, **kw: Any) -> RemoteClient:
        return RemoteClient(self.edge.http_url, self.token, **kw)


@pytest.fixture
async def gw(tmp_path: Path, services: tuple[str, str]) -> AsyncIterator[Gateway]:
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    dialect = ScriptDialect()
    async with running_edge(cfg, FakeRuntime(), services, dialect,
                            session_lookup_fn=knows) as edge:
        yield Gateway(edge, token, dialect)


async def test_initialize_opens_a_connection(gw: Gateway) -> None:
    c = gw.client()
    try:
        answer = await c.initialize("?agent=helper")
        assert answer["id"] == 0 and answer["result"]["agent"] == "helper"
        assert answer["result"]["principal"].startswith("client:")
        r = c.init_response
        assert r is not None and r.headers["content-type"] == "application/json"
        assert len(c.connection_id or "") == 36  # a UUID, as the RFD shows
        assert r.headers["set-cookie"].startswith("acpgate_affinity=")
        assert "HttpOnly" in r.headers["set-cookie"]
        assert gw.edge.connection_count == 1
        assert (await c.delete()).status_code == 202
        assert (await c.post(req("echo"))).status_code == 404  # the connection is gone
    finally:
        await c.aclose()


async def test_every_error_the_rfd_names(gw: Gateway) -> None:
    c = gw.client()
    raw = c.http
    url = gw.edge.http_url
    auth = {"Authorization": f"Bearer {gw.token}"}
    try:
        # POST: content type, JSON, batches, non-objects, missing / unknown connection ids.
        r = await raw.post(url, content=b"{}", headers={**auth, "Content-Type": "text/plain"})
        assert r.status_code == 415
        r = await raw.post(url, content=b"{nope", headers={**auth,
                                                            "Content-Type": "application/json"})
        assert r.status_code == 400
        assert (await raw.post(url, json=[req("initialize")], headers=auth)).status_code == 501
        assert (await raw.post(url, json=42, headers=auth)).status_code == 400
        assert (await raw.post(url, json=req("echo"), headers=auth)).status_code == 400
        r = await raw.post(url, json=req("echo"), headers={**auth, "Acp-Connection-Id": "nope"})
        assert r.status_code == 404
        await c.initialize()
        assert (await c.post(req("initialize"))).status_code == 400  # not on a connection
        # Session-scoped methods need Acp-Session-Id; it must agree with params.sessionId.
        assert (await c.post(req("session/prompt", {"sessionId": "s1"}))).status_code == 400
        assert (await c.post(req("session/cancel", {"sessionId": "s1"}, None))).status_code == 400
        r = await c.post(req("session/prompt", {"sessionId": STORED}), session="other")
        assert r.status_code == 400 and "Mismatched" in r.text
        # An Acp-Session-Id the caller cannot reach: 404 (POST and GET alike).
        r = await c.post(req("session/prompt", {"sessionId": "ghost"}), session="ghost")
        assert r.status_code == 404
        assert (await c.get(session="ghost")).status_code == 404
        assert (await c.get(session="x" * 500)).status_code == 400
        # GET: Accept must include text/event-stream; the connection id is required.
        assert (await c.get(Accept="application/json")).status_code == 406
        r = await raw.get(url, headers={**auth, "Accept": "text/event-stream"})
        assert r.status_code == 400
        r = await raw.get(url, headers={**auth, "Accept": "text/event-stream",
                                        "Acp-Connection-Id": "nope"})
        assert r.status_code == 404
        assert (await c.get(**{"Last-Event-ID": "abc"})).status_code == 400
        assert (await c.get(**{"Last-Event-ID": "99"})).status_code == 400  # never sent
        # DELETE: the connection id is required, an unknown one is 404.
        assert (await raw.delete(url, headers=auth)).status_code == 400
        r = await raw.delete(url, headers={**auth, "Acp-Connection-Id": "nope"})
        assert r.status_code == 404
        # Other methods and paths; no token at all.
        assert (await raw.put(url, json={}, headers=auth)).status_code == 405
        assert (await raw.post(url.replace("/acp", "/other"), json={})).status_code == 404
        r = await raw.post(url, json=req("initialize"))
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert (await c.delete()).status_code == 202
    finally:
        await c.aclose()


async def test_each_message_goes_on_the_stream_the_rfd_says(gw: Gateway) -> None:
    c = gw.client()
    try:
        await c.initialize()
        async with c.stream() as conn_stream:
            assert (await c.post(req("session/new", {}, 2))).status_code == 202
            new = (await conn_stream.next()).data  # session/new's answer: connection stream
            sid = new["result"]["sessionId"]
            assert new["id"] == 2
            async with c.stream(session=sid) as session_stream:
                # Everything of the session on its stream: updates, the agent's request,
                # the prompt's answer.
                assert (await c.post(req("session/prompt", {"sessionId": sid}, 3),
                                     session=sid)).status_code == 202
                update = await session_stream.next()
                assert update.data["params"] == {"sessionId": sid, "seq": 0}
                ask = (await session_stream.next()).data
                assert ask["method"] == "session/request_permission"
                answer = {"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": "ok"}}
                assert (await c.post(answer, session=sid)).status_code == 202
                done = (await session_stream.next()).data
                assert done["id"] == 3 and done["result"]["answer"] == {"outcome": "ok"}
                # Ids are per stream and count up: the SSE `id` of each event.
                assert [update.id] == ["1"]
                # Not of a session: connection stream (a list, an agent request without
                # a session, notifications without one).
                assert (await c.post(req("session/list", {}, 4))).status_code == 202
                assert (await conn_stream.next()).data["id"] == 4
                assert (await c.post(req("ask", {}, 5))).status_code == 202
                fs = (await conn_stream.next()).data
                assert fs["method"] == "fs/read_text_file"
                assert (await c.post({"jsonrpc": "2.0", "id": fs["id"], "result": {}})
                        ).status_code == 202
                assert (await conn_stream.next()).data["id"] == 5
    finally:
        await c.aclose()


async def test_a_session_the_client_has_no_stream_for_yet_reaches_it(gw: Gateway) -> None:
    """The Python SDK's session/load: no Acp-Session-Id, no session stream opened first.
    The replay then comes on the connection stream, where the client learns the id; the
    TypeScript SDK's (stream opened first, header sent) gets it on the session stream."""
    c = gw.client()
    try:
        await c.initialize()
        async with c.stream() as conn_stream:
            assert (await c.post(req("session/load", {"sessionId": STORED}, 7))).status_code \
                == 202
            got = await conn_stream.until(lambda d: d.get("id") == 7)
            assert [e.data["params"]["seq"] for e in got[:-1]] == [0, 1, 2]
        c2 = gw.client()
        try:
            await c2.initialize()
            async with c2.stream() as conn_stream, c2.stream(session=STORED) as session_stream:
                assert (await c2.post(req("session/load", {"sessionId": STORED}, 8),
                                      session=STORED)).status_code == 202
                assert (await conn_stream.next()).data["id"] == 8  # the answer: connection
                got = [await session_stream.next() for _ in range(3)]
                assert [e.data["params"]["seq"] for e in got] == [0, 1, 2]
        finally:
            await c2.aclose()
    finally:
        await c.aclose()


async def test_an_answer_must_come_for_the_session_its_request_went_to(gw: Gateway) -> None:
    c = gw.client()
    try:
        await c.initialize()
        async with c.stream() as conn_stream:
            await c.post(req("session/new", {}, 1))
            sid = (await conn_stream.next()).data["result"]["sessionId"]
            await c.post(req("session/new", {}, 2))
            other = (await conn_stream.next()).data["result"]["sessionId"]
            async with c.stream(session=sid) as stream, c.stream(session=other):
                await c.post(req("session/prompt", {"sessionId": sid}, 3), session=sid)
                await stream.next()
                ask = (await stream.next()).data
                answer = {"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": "x"}}
                r = await c.post(answer, session=other)
                assert r.status_code == 400 and "Mismatched" in r.text
                # Without the header (the Python SDK sends none on answers) it is taken.
                assert (await c.post(answer)).status_code == 202
                assert (await stream.next()).data["id"] == 3
    finally:
        await c.aclose()


async def test_connection_ids_are_per_caller(gw: Gateway, tmp_path: Path) -> None:
    """Another token's connection id is answered like an unknown one (full matrix in
    tests/security/test_remote_transport.py)."""
    c = gw.client()
    _, other = mint(gw.edge.cfg, "other")
    intruder = RemoteClient(gw.edge.http_url, other)
    try:
        await c.initialize()
        intruder.connection_id = c.connection_id
        assert (await intruder.post(req("echo"))).status_code == 404
        assert (await intruder.get()).status_code == 404
        assert (await intruder.delete()).status_code == 404
        assert (await c.post(req("echo"))).status_code == 202  # still the owner's
    finally:
        await c.aclose()
        await intruder.aclose()


async def test_metrics_count_streamable_connections(gw: Gateway) -> None:
    c = gw.client()
    try:
        await c.initialize()
        async with c.stream():
            r = await c.http.get(gw.edge.http_url.replace("/acp", "/metrics"))
            body = r.text
            assert "acpgate_http_connections 1" in body
            assert "acpgate_http_connections_total 1" in body
            assert "acpgate_sse_streams 1" in body
            assert "acpgate_ws_connections 0" in body
    finally:
        await c.aclose()


async def test_a_json_message_with_line_breaks_stays_one_event(gw: Gateway) -> None:
    """JSON may carry raw line breaks between tokens (a POST's, an adapter's line): a POST
    is read whole; on a stream each line becomes its own ``data:`` line of one event."""
    c = gw.client()
    try:
        await c.initialize()
        async with c.stream() as stream:
            line = json.dumps({"jsonrpc": "2.0", "method": "note", "params": {"a": [1, 2]}},
                              indent=2).replace("\n", "\r\n", 1)
            pretty = json.dumps(req("raw", {"line": line}, 9), indent=2).encode()
            r = await c.http.post(gw.edge.http_url, content=pretty, headers={
                **c._headers(), "Content-Type": "application/json; charset=utf-8"})
            assert r.status_code == 202
            assert (await stream.next()).data == json.loads(line)
            assert (await stream.next()).data["id"] == 9
    finally:
        await c.aclose()


async def test_http_client_default_is_http1(gw: Gateway) -> None:
    async with httpx.AsyncClient() as raw:
        r = await raw.get(gw.edge.http_url.replace("/acp", "/healthz"))
        assert r.status_code == 200 and r.http_version == "HTTP/1.1"
