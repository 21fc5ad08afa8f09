"""The web console from the attacker's side.

- Its static files: no request target — ``..``, encoded, doubled slashes, absolute
  form — reads anything but the shipped files; a symlink planted among them is never
  followed.
- Its way in: the console's own page may use ``/acp`` (same origin) only where the
  gateway's ``Host`` is an IP literal or ``localhost``; a page whose DNS name was
  rebound to the gateway (``Origin`` and ``Host`` alike ``evil.example``) or another
  port's page gets 403 before the token is even read (Streamable HTTP, which the
  console does not use, still admits listed origins only); the ``bearer.<token>``
  subprotocol entry is never echoed back.
- The host view (``_acpgate/host/*``): a token without the host grant — a plain one, a
  ``see-all`` one — gets one and the same refusal whatever it names (a live session
  of another token, a missing one), nothing is closed; a grant revoked counts at once.
- Agent text: the console's scripts contain no HTML-parsing sink at all (the real
  browser test shows an agent's ``<img onerror>`` / ``<script>`` rendered as text).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from services.common.protocol import MSG_HOST_REFUSED, WS_SUBPROTOCOL
from services.edge.transport.console import CONSOLE_DIR, load_assets
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, Token, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def raw_exchange(port: int, head: str) -> tuple[int, dict[str, str], bytes]:
    """Send ``head`` (request line and headers) as is; (status, headers, body) back."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        header, _, body = data.partition(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return int(lines[0].split()[1]), headers, body


def get(port: int, target: str) -> tuple[int, dict[str, str], bytes]:
    """A GET of ``target`` exactly as written (no client-side normalization)."""
    return raw_exchange(port, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                              "Connection: close\r\n\r\n")


def upgrade(port: int, host: str, origin: str | None, token: str) -> tuple[int, dict[str, str]]:
    """A browser-like WebSocket handshake on /acp with the token as a subprotocol entry."""
    key = base64.b64encode(os.urandom(16)).decode()
    head = (f"GET /acp HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Protocol: {WS_SUBPROTOCOL}, bearer.{token}\r\n")
    if origin is not None:
        head += f"Origin: {origin}\r\n"
    status, headers, _ = raw_exchange(port, head + "\r\n")
    return status, headers


def post(port: int, host: str, origin: str, token: str) -> int:
    """A Streamable HTTP initialize from a browser page at ``origin``."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": 1}})
    status, _, _ = raw_exchange(port, (
        f"POST /acp HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n{body}"))
    return status


async def test_no_request_target_reads_outside_the_shipped_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.js"
    secret.write_text("the operator's secret")
    async with running_gateway(tmp_path / "gw") as gw:
        port = gw.port
        for target in ("/console/../../../../etc/passwd", "/console/js/../../console.py",
                       "/console/..%2f..%2fconsole.py", "/console/%2e%2e/%2e%2e/routes.py",
                       "/console/js/..%5c..%5cconsole.py", "/console//etc/passwd",
                       f"/console/{secret}", "/console/%2Fetc%2Fpasswd",
                       "/console/js/app.js%00.py", "/../../etc/passwd",
                       f"http://127.0.0.1:{port}/console/../console.py", "/console/./js/app.js"):
            status, _, body = await asyncio.to_thread(get, port, target)
            assert status in (400, 404), (target, status)
            assert b"root:" not in body and b"secret" not in body, target
            assert b"def load_assets" not in body, target
        # The real file is served: the refusals above are not a broken route.
        status, _, body = await asyncio.to_thread(get, port, "/console/js/app.js")
        assert status == 200 and b"sessionStorage" in body


def test_symlinks_among_the_files_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "stolen.js").write_text("secret")
    root = tmp_path / "console_files"
    (root / "js").mkdir(parents=True)
    (root / "js" / "ok.js").write_text("export {};")
    (root / "leak.js").symlink_to(outside / "stolen.js")
    (root / "dir").symlink_to(outside, target_is_directory=True)
    (root / "notes.py").write_text("not a console type")
    assert sorted(load_assets(root)) == ["js/ok.js"]


async def test_only_the_gateways_own_unrebindable_origin_may_use_acp(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        token = (await gw.token("browser")).secret
        port = gw.port
        own = f"127.0.0.1:{port}"
        status, headers = await asyncio.to_thread(upgrade, port, own, f"http://{own}", token)
        assert status == 101
        assert headers["sec-websocket-protocol"] == WS_SUBPROTOCOL  # the token not echoed
        status, _ = await asyncio.to_thread(upgrade, port, f"localhost:{port}",
                                            f"http://localhost:{port}", token)
        assert status == 101
        for host, origin in ((f"evil.example:{port}", f"http://evil.example:{port}"),
                             (own, f"http://127.0.0.1:{port + 1}"),
                             (own, f"https://{own}"), (own, "null"),
                             (own, f"http://evil.example:{port}"),
                             (f"evil.example:{port}", f"http://{own}")):
            status, _ = await asyncio.to_thread(upgrade, port, host, origin, token)
            assert status == 403, (host, origin)
            assert await asyncio.to_thread(post, port, host, origin, token) == 403, origin
        # Streamable HTTP, which the console does not use, admits listed origins only.
        assert await asyncio.to_thread(post, port, own, f"http://{own}", token) == 403
        assert token not in gw.log.read_text(errors="replace")


async def _client(gw: Gateway, token: Token) -> tuple[Any, RawClient]:
    ws = await gw.connect(token)
    client = RawClient(ws)
    await client.result("initialize", {"protocolVersion": 1})
    return ws, client


async def test_host_methods_refuse_every_token_without_the_host_grant(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        victim, plain, viewer = [await gw.token(n) for n in ("victim", "plain", "viewer")]
        await gw.grant(viewer, "see-all")
        code, out, err = await gw.cli("token", "create", "--name", "ops", "--admin")
        assert code == 0, err
        admin_id = err.split("token id:", 1)[1].split()[0]
        admin = Token(admin_id, out.strip())
        vws, vclient = await _client(gw, victim)
        sid = (await vclient.result("session/new", {"cwd": ""}))["sessionId"]
        await vclient.say(sid, "private work")

        refusals = []
        for token in (plain, viewer):
            ws, client = await _client(gw, token)
            for method, params in (("_acpgate/host/ps", {}),
                                   ("_acpgate/host/close", {"sessionId": sid}),
                                   ("_acpgate/host/cancel", {"sessionId": sid}),
                                   ("_acpgate/host/close", {"sessionId": "no-such-session"}),
                                   ("_acpgate/host/close", {"sessionId": ["bad", "type"]}),
                                   ("_acpgate/host/ps", {"sessionId": sid})):
                _, resp = await client.call(method, params)
                assert "result" not in resp, (method, resp)
                refusals.append(resp["error"])
            await ws.close()
        assert all(r == {"code": -32000, "message": MSG_HOST_REFUSED} for r in refusals), \
            refusals
        assert "still mine" in await vclient.say(sid, "still mine")  # nothing was closed

        # The admin token sees the install: the victim's session by its token's name.
        aws, aclient = await _client(gw, admin)
        report = await aclient.result("_acpgate/host/ps", {})
        (mine,) = [s for s in report["sessions"] if s["sessionId"] == sid]
        assert (mine["owner"], mine["state"], mine["servedHere"]) == ("victim", "idle", True)
        assert victim.secret not in json.dumps(report)
        # A revoked grant counts at once, on the open connection too.
        await gw.grant(admin, "host", revoke=True)
        _, resp = await aclient.call("_acpgate/host/ps", {})
        assert resp["error"]["message"] == MSG_HOST_REFUSED
        await aws.close()
        await vws.close()


def test_the_console_scripts_have_no_html_parsing_sink() -> None:
    sinks = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|"
                       r"new Function|createContextualFragment|DOMParser|srcdoc|"
                       r"setAttribute\(\s*[\"']on")
    scripts = sorted((CONSOLE_DIR / "js").glob("*.js"))
    assert scripts
    for script in scripts:
        found = sinks.findall(script.read_text(encoding="utf-8"))
        assert not found, (script.name, found)
