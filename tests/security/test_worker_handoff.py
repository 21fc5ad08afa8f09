"""From the attacker's side: the edge workers' hand-over of connections.

A worker takes a client's socket in from whoever proves, on its owner-only unix
socket, that it holds the install's service credential; a marked request
(``Acp-Connection-Id`` ``w<k>-…``, the affinity cookie, ``?worker=``) goes to the
worker it names, which still checks the token. So: another uid cannot reach the
socket; a process of this uid without the proof (or with a proof for another
worker) hands nothing in; a forged mark gets today's 404, never another token's
connection; and a connection handed over is admitted within the token's shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from services.common.grpc_auth import grpc_security
from services.edge.transport.handoff.service import run_dir
from services.edge.transport.handoff.wire import (
    ACCEPTED,
    REFUSED,
    encode_header,
    handoff_key,
    handoff_socket_path,
)
from tests.gateway.streamable_client import INIT, RemoteClient
from tests.gateway.test_serve_handoff import adopted, adopted_now, pinned
from tests.gateway.workers_serve import Served, serve_workers
from tests.gateway.wsfixtures import mint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def hand_in(served: Served, worker: int, header: bytes) -> bytes:
    """Send worker ``worker`` a TCP connection (to a listener of the test's) with
    ``header`` and a request as pre-read bytes; its one-line answer."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    path = handoff_socket_path(run_dir(served.cfg), worker)
    assert path is not None
    link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        link.connect(path)
        socket.send_fds(link, [header], [client.fileno()])
        with contextlib.suppress(BrokenPipeError):  # a refusal may come before it is read
            link.sendall(REQUEST)
        return await asyncio.to_thread(link.recv, 16)
    finally:
        for sock in (link, client, listener):
            sock.close()


REQUEST = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"


def header(key: bytes, *, to: int) -> bytes:
    return encode_header(key, 2, to, len(REQUEST))


async def test_only_a_sibling_with_the_proof_hands_a_socket_in(tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        path = handoff_socket_path(run_dir(served.cfg), 1)
        assert path is not None and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        real = handoff_key(grpc_security(served.cfg).token)
        # Without the credential: a key of another install, a proof that is not one.
        assert await hand_in(served, 1, header(handoff_key("guessed"), to=1)) == REFUSED
        forged = header(real, to=1).replace(b'"proof":"', b'"proof":"00')
        assert await hand_in(served, 1, forged) == REFUSED
        # A proof for worker 2 is no proof for worker 1.
        assert await hand_in(served, 1, header(real, to=2)) == REFUSED
        assert adopted(served) == {}
        # The same exchange with the proof is taken in (what makes the refusals mean it).
        assert await hand_in(served, 1, header(real, to=1)) == ACCEPTED
        await adopted_now(served, {"edge-1": 1})


async def test_another_uid_cannot_reach_a_workers_socket(tmp_path: Path) -> None:
    python = "/usr/bin/python3"  # the checkout's venv may be out of another uid's reach
    if os.getuid() != 0 or not os.access(python, os.X_OK):
        pytest.skip("needs root (to run a process as another uid) and /usr/bin/python3")
    async with serve_workers(tmp_path) as served:
        path = handoff_socket_path(run_dir(served.cfg), 1)
        probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                 "try:\n s.connect(sys.argv[1]); print('connected')\n"
                 "except OSError as e: print(type(e).__name__)\n")
        out = await asyncio.to_thread(subprocess.run, [python, "-c", probe, str(path)],
                                      capture_output=True, text=True, user=65534, check=False,
                                      timeout=30)
        assert out.stdout.strip() == "PermissionError", out


async def test_a_forged_mark_gets_todays_404_never_another_tokens_connection(
        tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        _, other_secret = mint(served.cfg, "other")
        victim = RemoteClient(f"http://127.0.0.1:{served.port}/acp", other_secret)
        try:
            await victim.initialize()
            owner = int((victim.connection_id or "").split("-")[0][1:])
            async with pinned(served, 3 - owner) as attacker:
                # An id in the other worker's form that names nothing; the victim's real id
                # (another token's connection): both the answer to an unknown id, as today.
                for cid in (f"w{owner}-{uuid.uuid4()}", victim.connection_id or ""):
                    attacker.connection_id = cid
                    r = await attacker.post({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                                             "params": {}})
                    assert (r.status_code, r.text) == (404, "Unknown Acp-Connection-Id\n")
                    r = await attacker.get()
                    assert (r.status_code, r.text) == (404, "Unknown Acp-Connection-Id\n")
                    assert (await attacker.delete()).status_code == 404
            await adopted_now(served, {f"edge-{owner}": 1})  # one handed over, then kept
            assert (await victim.post({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                                       "params": {}})).status_code == 202  # untouched
        finally:
            await victim.aclose()


async def test_a_handed_over_connection_stays_within_the_tokens_share(tmp_path: Path) -> None:
    async with serve_workers(tmp_path, gateway="max_connections_per_token = 1\n") as served:
        first = RemoteClient(f"http://127.0.0.1:{served.port}/acp", served.secret)
        try:
            await first.initialize()
            assert first.init_response is not None
            cookie = first.init_response.headers["set-cookie"].split(";")[0]
            owner = int(cookie.rsplit("-w", 1)[1])
            # The other worker accepts; the cookie sends the connection to the token's
            # worker, which already holds the token's one connection: 503 there.
            async with pinned(served, 3 - owner) as second:
                r = await second.http.post(second.url, json=INIT, headers={
                    **second.headers, "Cookie": cookie})
                assert r.status_code == 503, r.text
            await adopted_now(served, {f"edge-{owner}": 1})
        finally:
            await first.aclose()
