"""HTTP/1.1 request smuggling against the gateway's port, from a raw socket.

A request whose framing is ambiguous — ``Content-Length`` with
``Transfer-Encoding`` (CL.TE, TE.CL), a repeated ``Content-Length``, obsolete
line folding, a bare LF, a malformed chunk — is read differently by a proxy in
front than by the gateway: what one takes for body the other takes for a second
request. RFC 9112 §6.3: such a request is answered 400 and the connection
closed, nothing after it read. Each attack here hides a ``GET /metrics`` behind
its first request; the attacker must get exactly one response (400), then EOF —
on the worker that accepted the connection, and where the request's mark hands
the connection to a sibling worker.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import h11
import pytest

from tests.gateway.test_serve_handoff import pinned_socket
from tests.gateway.workers_serve import Served, serve_workers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SMUGGLED = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
#: How long a connection may stay silent before the test stops waiting for its EOF.
EOF_WAIT = 30.0


def post(target: bytes, fields: bytes, body: bytes) -> bytes:
    """A ``POST`` whose head carries ``fields`` (CRLF-ended lines) as given."""
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n%s" % (
        target, fields, body)


def attacks(target: bytes) -> dict[str, bytes]:
    """Name → the bytes an attacker sends (each hides ``GET /metrics``)."""
    chunked_end = b"0\r\n\r\n" + SMUGGLED
    inner = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nx=1"
    te_cl_body = b"%x\r\n%s\r\n0\r\n\r\n%s" % (len(inner), inner, SMUGGLED)
    return {
        "CL.TE": post(target, b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
                      % len(chunked_end), chunked_end),
        "TE.CL": post(target, b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                      te_cl_body),
        "TE with a space before the colon": post(
            target, b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n"
            % len(chunked_end), chunked_end),
        "TE not chunked last": post(
            target, b"Transfer-Encoding: chunked, identity\r\n", chunked_end),
        "TE in HTTP/1.0": post(target, b"Transfer-Encoding: chunked\r\n", chunked_end)
        .replace(b"HTTP/1.1", b"HTTP/1.0", 1),
        "repeated equal Content-Length": post(
            target, b"Content-Length: 0\r\nContent-Length: 0\r\n", SMUGGLED),
        "Content-Length list": post(target, b"Content-Length: 0, 0\r\n", SMUGGLED),
        "conflicting Content-Length": post(
            target, b"Content-Length: 0\r\nContent-Length: %d\r\n" % len(SMUGGLED), SMUGGLED),
        "obsolete line folding": post(target, b"Content-Length: 0\r\nX-A: b\r\n c\r\n",
                                      SMUGGLED),
        "bare LF head": post(target, b"Content-Length: 0\r\n", SMUGGLED)
        .replace(b"\r\n", b"\n", 4),
        "invalid chunk size": post(target, b"Transfer-Encoding: chunked\r\n",
                                   b"zz\r\nabc\r\n" + chunked_end),
        "chunk size with a sign": post(target, b"Transfer-Encoding: chunked\r\n",
                                       b"+3\r\nabc\r\n" + chunked_end),
        "bare LF after the last chunk": post(target, b"Transfer-Encoding: chunked\r\n",
                                             b"0\r\n\n" + SMUGGLED),
        "chunk longer than its size": post(target, b"Transfer-Encoding: chunked\r\n",
                                           b"1\r\nabc\r\n" + chunked_end),
    }


async def answers(sock: socket.socket, data: bytes, expected: int = 1, *,
                  keep_alive: bool = False) -> tuple[list[int], bool]:
    """Send ``data`` on ``sock``: the statuses of the responses that came back (read as
    a client reads them; -1 for bytes that are none), and whether the gateway closed the
    connection after them. Stops at one response more than ``expected`` (a smuggled
    request was answered), or, with ``keep_alive``, once ``expected`` ones ended."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    await loop.sock_sendall(sock, data)
    client = h11.Connection(h11.CLIENT)
    statuses: list[int] = []
    while len(statuses) <= expected:
        if client.our_state is h11.IDLE:  # h11 reads a response to a request it sent
            client.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
            client.send(h11.EndOfMessage())
        try:
            event = client.next_event()
        except h11.RemoteProtocolError:  # bytes after a response that said "close"
            statuses.append(-1)
            break
        if event is h11.NEED_DATA:
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), EOF_WAIT)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                return statuses, True
            client.receive_data(chunk)
        elif isinstance(event, h11.Response):
            statuses.append(event.status_code)
        elif isinstance(event, h11.EndOfMessage) and client.their_state is h11.DONE:
            if keep_alive and len(statuses) == expected:
                return statuses, False
            client.start_next_cycle()
    return statuses, False


async def attack_all(served: Served, target: bytes, worker: int | None) -> dict[str, object]:
    """Every attack on a fresh connection (accepted by ``worker`` where given): the
    ones not answered ``([400], closed)``, with what they got."""
    wrong: dict[str, object] = {}
    for name, data in attacks(target).items():
        if worker is None:
            sock = socket.create_connection(("127.0.0.1", served.port))
        else:
            sock = await pinned_socket(served, worker)
        try:
            got = await answers(sock, data)
        finally:
            sock.close()
        if got != ([400], True):
            wrong[name] = got
    return wrong


async def test_ambiguous_framing_gets_one_400_then_the_connection_closes(
        tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        assert await attack_all(served, b"/acp", None) == {}
        # Well-framed requests on the same port are still served, keep-alive included:
        # a chunked body (split, with an extension and a trailer), then a pipelined GET.
        chunked = post(b"/acp", b"Transfer-Encoding: chunked\r\n",
                       b"2;x=1\r\n{}\r\n0\r\nX-T: 1\r\n\r\n")
        for first, status in ((b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200),
                              (chunked, 401)):
            sock = socket.create_connection(("127.0.0.1", served.port))
            try:
                got = await answers(sock, first + SMUGGLED, expected=2, keep_alive=True)
            finally:
                sock.close()
            assert got == ([status, 200], False)


async def refused_by(served: Served, remote: str) -> str:
    """The worker process whose log refused an unframed request from ``remote`` (the
    client's address), once exactly one has (its lines are written by a thread: one may
    land a moment after the 400 it sent)."""
    async def logged() -> list[str]:
        return [e["process"] for e in served.events()
                if e.get("event") == "http1_unframed" and e.get("remote") == remote]
    for _ in range(200):
        if found := await logged():
            break
        await asyncio.sleep(0.05)
    found = await logged()
    assert len(found) == 1, (remote, found)
    return found[0]


async def test_a_request_for_a_sibling_worker_carries_no_smuggled_request(
        tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        # Worker 1 accepts; the mark names worker 2: a bad head is refused before the
        # hand-over, a bad chunked body (read after it) by worker 2. Worker 2 accepting its
        # own marked requests refuses them all.
        for accepting in (1, 2):
            assert await attack_all(served, b"/acp?worker=2", accepting) == {}
        # A well-framed marked request is handed over with what followed it: the
        # sibling reads that with the same rules.
        sock = await pinned_socket(served, 1)
        remote = "{}:{}".format(*sock.getsockname()[:2])
        marked = b"GET /healthz?worker=2 HTTP/1.1\r\nHost: x\r\n\r\n"
        smuggle = attacks(b"/acp")["CL.TE"]
        try:
            got = await answers(sock, marked + smuggle, expected=2)
        finally:
            sock.close()
        assert got == ([200, 400], True)
        # Worker 1 accepted this connection; worker 2 refused the smuggled request on it.
        assert await refused_by(served, remote) == "edge-2"
