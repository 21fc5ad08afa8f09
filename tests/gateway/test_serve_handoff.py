"""A connection a sibling edge worker accepted is handed to the worker it belongs to.

Real ``acpgate serve`` with ``workers = 2``, real sockets. Which worker accepts is
made the test's where it must be (``pinned``: a keep-alive client whose connection
one worker accepted while the other was stopped — its next requests arrive there,
whoever owns them), and left to the kernel elsewhere (``Connection: close``: a
fresh TCP connection per request).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psutil
import pytest
from acp.http import create_http_stream

from tests.e2e.harness import workspace_beside_config
from tests.gateway.streamable_client import RemoteClient
from tests.gateway.test_py_sdk_remote import _scenario

from .workers_serve import Served, dial, on_worker, serve_workers, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def req(method: str, params: dict[str, Any], rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def text(words: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": words}]


@contextlib.asynccontextmanager
async def pinned(served: Served, number: int, **headers: str) -> AsyncIterator[RemoteClient]:
    """A keep-alive Streamable HTTP client whose one TCP connection worker ``number``
    accepted (the other stopped meanwhile): what it sends next arrives there."""
    client = RemoteClient(f"http://127.0.0.1:{served.port}/acp", served.secret,
                          headers=headers)
    client.http = httpx.AsyncClient(http1=True, timeout=httpx.Timeout(30.0, read=None),
                                    limits=httpx.Limits(max_connections=1))
    try:
        with on_worker(served, number):
            r = await client.http.get(f"http://127.0.0.1:{served.port}/healthz")
            assert r.status_code == 200
        yield client
    finally:
        await client.aclose()


async def pinned_socket(served: Served, number: int) -> socket.socket:
    """A TCP connection worker ``number`` accepted (it answered a keep-alive ``/healthz``
    on it while the other was stopped), ready for the next request."""
    loop = asyncio.get_running_loop()
    with on_worker(served, number):
        sock = socket.create_connection(("127.0.0.1", served.port))
        sock.setblocking(False)
        await loop.sock_sendall(sock, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got:
            got += await loop.sock_recv(sock, 65536)
        head, _, body = got.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += await loop.sock_recv(sock, 65536)
    return sock


def adopted(served: Served) -> dict[str, int]:
    """Worker process name → connections it took in from a sibling."""
    out: dict[str, int] = {}
    for event in served.events():
        if event.get("event") == "handoff_adopted":
            out[event["process"]] = out.get(event["process"], 0) + 1
    return out


async def adopted_now(served: Served, expected: dict[str, int]) -> None:
    """Wait until the log shows ``expected`` hand-overs (its lines are written by a thread:
    one may land a moment after the answer it preceded)."""
    async def shown() -> bool:
        return adopted(served) == expected
    try:
        await until(shown, f"hand-overs {expected}", tries=200)
    except AssertionError:
        assert adopted(served) == expected


async def answer(stream: Any, rid: int) -> dict[str, Any]:
    events = await stream.until(lambda d: isinstance(d, dict) and d.get("id") == rid)
    return dict(events[-1].data)


async def test_streamable_http_one_tcp_connection_per_request(tmp_path: Any) -> None:
    async with serve_workers(tmp_path) as served:
        fresh = RemoteClient(f"http://127.0.0.1:{served.port}/acp", served.secret,
                             headers={"Connection": "close"})
        try:
            await fresh.initialize()
            cid = fresh.connection_id or ""
            owner = int(cid.split("-", 1)[0].removeprefix("w"))
            assert owner in (1, 2) and len(cid.split("-", 1)[1]) == 36
            other = 3 - owner
            assert fresh.init_response is not None
            cookie = fresh.init_response.headers["set-cookie"]
            assert cookie.split(";")[0].endswith(f"-w{owner}")

            # The other worker accepted these connections: each request is handed over.
            async with pinned(served, other) as via_other, \
                    pinned(served, other) as reader:
                via_other.connection_id = reader.connection_id = cid
                async with reader.stream() as conn_stream:
                    r = await via_other.post(req("session/new", {}, 1))
                    assert r.status_code == 202, r.text
                    sid = (await answer(conn_stream, 1))["result"]["sessionId"]
                async with reader.stream(session=sid) as s_stream:
                    r = await via_other.post(req("session/prompt", {
                        "sessionId": sid, "prompt": text("pinned")}, 2),
                        session=sid)
                    assert r.status_code == 202, r.text
                    assert (await answer(s_stream, 2))["result"]["stopReason"] == "end_turn"
            # Each pinned connection was handed over once, then was the owner's (the second
            # stream's connection is a fresh one: handed over, or not, as the kernel chose).
            async def both_shown() -> bool:
                return adopted(served).get(f"edge-{owner}", 0) >= 2
            await until(both_shown, "the two pinned connections' hand-overs logged")
            assert set(adopted(served)) == {f"edge-{owner}"}

            # Whichever worker the kernel picks: every request of a fresh connection works.
            async with fresh.stream(session=sid) as s_stream:
                for n in range(3, 23):
                    r = await fresh.post(req("session/prompt", {
                        "sessionId": sid, "prompt": text(f"hello {n}")}, n),
                        session=sid)
                    assert r.status_code == 202, (n, r.text)
                    assert (await answer(s_stream, n))["result"]["stopReason"] == "end_turn"
            assert (await fresh.delete()).status_code == 202
        finally:
            await fresh.aclose()
        assert not adopted(served).get(f"edge-{other}")  # nothing was the other's


async def test_websocket_with_the_cookie_takes_up_its_detached_session(tmp_path: Any) -> None:
    async with serve_workers(tmp_path, detach_grace_secs=120) as served:
        from .stack import RawClient, select

        with on_worker(served, 1):
            ws = await dial(served)
        cookie = (ws.response.headers.get("Set-Cookie") or "").split(";")[0]
        assert cookie.endswith("-w1"), cookie
        first = RawClient(ws, select("allow-once"))
        await first.result("initialize", {"protocolVersion": 1})
        sid = (await first.result("session/new", {}))["sessionId"]
        await ws.close()  # detached on worker 1 for the grace

        from websockets.asyncio.client import connect

        # Without the cookie (an SDK client): worker 2 answers, naming worker 1 ...
        bare = await connect(f"ws://127.0.0.1:{served.port}/acp", proxy=None, open_timeout=30,
                             sock=await pinned_socket(served, 2), additional_headers={
                                 "Authorization": f"Bearer {served.secret}"})
        lost = RawClient(bare, select("allow-once"))
        await lost.result("initialize", {"protocolVersion": 1})
        _, resp = await lost.call("session/load", {"sessionId": sid, "cwd": "/",
                                                   "mcpServers": []})
        assert {k: v for k, v in resp["error"]["data"]["acpgate"]["liveAt"].items()
                if k in ("worker", "query")} == {"worker": 1, "query": "worker=1"}, resp
        await bare.close()
        # ... and ?worker=1 on the URL reaches it (worker 2 accepting, handing it over).
        ws_q = await connect(f"ws://127.0.0.1:{served.port}/acp?worker=1", proxy=None,
                             open_timeout=30, sock=await pinned_socket(served, 2),
                             additional_headers={"Authorization": f"Bearer {served.secret}"})
        via_query = RawClient(ws_q, select("allow-once"))
        await via_query.result("initialize", {"protocolVersion": 1})
        await via_query.result("session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})
        await ws_q.close()  # detached on worker 1 again

        # Worker 2 accepts the reconnect; the cookie names worker 1, which takes it up.
        ws2 = await connect(f"ws://127.0.0.1:{served.port}/acp", proxy=None, open_timeout=30,
                            sock=await pinned_socket(served, 2), additional_headers={
                                "Authorization": f"Bearer {served.secret}", "Cookie": cookie})
        again = RawClient(ws2, select("allow-once"))
        await again.result("initialize", {"protocolVersion": 1})
        await again.result("session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})
        res = await again.result("session/prompt", {"sessionId": sid,
                                                    "prompt": text("back")})
        assert res["stopReason"] == "end_turn"
        await ws2.close()
        await adopted_now(served, {"edge-1": 2})


async def test_the_official_sdk_over_streamable_http_with_two_workers(tmp_path: Any) -> None:
    async with serve_workers(tmp_path) as served:
        url = f"http://127.0.0.1:{served.port}/acp"

        async def dial() -> Any:  # every request on a fresh TCP connection
            return create_http_stream(url, headers={"Authorization": f"Bearer {served.secret}",
                                                    "Connection": "close"})

        cwd = workspace_beside_config(tmp_path)
        for _ in range(2):  # the SDK's GET and POSTs land on either worker
            await asyncio.wait_for(_scenario(dial, cwd), 90)


async def test_an_owner_that_died_is_a_503_with_retry_after(tmp_path: Any) -> None:
    async with serve_workers(tmp_path) as served:
        loop = asyncio.get_running_loop()
        sock = await pinned_socket(served, 1)
        supervisor = psutil.Process(served.proc.pid)
        supervisor.suspend()  # serve restarts no worker meanwhile
        try:
            dead = served.workers()[2]
            dead.kill()
            await until(lambda: _dead(dead), "worker 2 gone")
            await loop.sock_sendall(sock, (
                f"POST /acp HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {served.secret}\r\n"
                f"acp-connection-id: w2-{uuid.uuid4()}\r\ncontent-type: application/json\r\n"
                f"content-length: 2\r\n\r\n{{}}").encode())
            got = b""
            while chunk := await loop.sock_recv(sock, 65536):  # then the connection closes
                got += chunk
        finally:
            supervisor.resume()
            sock.close()
        head = got.split(b"\r\n\r\n")[0].lower()
        assert head.startswith(b"http/1.1 503 "), got
        assert b"\r\nretry-after: 1" in head and b"w2" in got


async def _dead(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_body_that_follows_its_head_later_goes_along(tmp_path: Any) -> None:
    async with serve_workers(tmp_path) as served:
        loop = asyncio.get_running_loop()
        client = RemoteClient(f"http://127.0.0.1:{served.port}/acp", served.secret)
        try:
            await client.initialize()
            cid = client.connection_id or ""
            owner = int(cid.split("-", 1)[0][1:])
            sock = await pinned_socket(served, 3 - owner)
            body = b'{"jsonrpc":"2.0","id":7,"method":"session/list","params":{}}'
            # The head alone decides the hand-over; the body is sent after it, separately.
            await loop.sock_sendall(sock, (
                f"POST /acp HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {served.secret}\r\n"
                f"acp-connection-id: {cid}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode())
            await loop.sock_sendall(sock, body)
            got = b""
            while b"\r\n\r\n" not in got:
                got += await loop.sock_recv(sock, 65536)
            assert got.startswith(b"HTTP/1.1 202 "), got
            sock.close()
            await adopted_now(served, {f"edge-{owner}": 1})
        finally:
            await client.aclose()
