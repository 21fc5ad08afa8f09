"""The remote transport on the wire: HTTP/2 (curl, h2c upgrade, TLS ALPN), the WebSocket 101,
browsers (Origin, CORS), keepalives, idle connections, resumed streams, slow readers.

The scripted dialect of ``script_dialect.py`` stands in for the edge's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from services.edge.transport.streamable.streams import REPLAY_EVENTS

from .script_dialect import ScriptDialect
from .streamable_client import RemoteClient
from .test_streamable_http import req
from .wsfixtures import FakeRuntime, mint, running_edge, stand_in_services, write_config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    async with stand_in_services(tmp_path, [lifecycle_pb2.LEASE_STATE_OPEN]) as addrs:
        yield addrs


async def _curl(*args: str) -> str:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    proc = await asyncio.create_subprocess_exec(
        curl, "-sS", "-i", "--max-time", "20", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_curl_http2_prior_knowledge_and_h2c_upgrade(tmp_path: Path,
                                                          services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        init = json.dumps(req("initialize", {"protocolVersion": 1}, 0))
        common = ["-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json"]
        out = await _curl("--http2-prior-knowledge", *common, "--data", init, edge.http_url)
        assert out.startswith("HTTP/2 200"), out
        assert "acp-connection-id:" in out.lower()
        conn_id = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                       if line.lower().startswith("acp-connection-id:"))
        assert json.loads(out.split("\r\n\r\n", 1)[1])["result"]["protocolVersion"] == 1
        out = await _curl("--http2-prior-knowledge", *common, "-H",
                          f"Acp-Connection-Id: {conn_id}", "--data",
                          json.dumps(req("echo")), edge.http_url)
        assert out.startswith("HTTP/2 202"), out
        # HTTP/1.1 → HTTP/2 by Upgrade: h2c (a GET, as curl upgrades): 101, then HTTP/2.
        out = await _curl("--http2", "-H", f"Authorization: Bearer {token}",
                          edge.http_url.replace("/acp", "/healthz"))
        assert out.startswith("HTTP/1.1 101"), out
        assert "HTTP/2 200" in out
        out = await _curl("--http2-prior-knowledge", "-X", "DELETE", "-H",
                          f"Authorization: Bearer {token}", "-H",
                          f"Acp-Connection-Id: {conn_id}", edge.http_url)
        assert out.startswith("HTTP/2 202"), out


async def test_tls_offers_http2_by_alpn_and_keeps_wss(tmp_path: Path, services: tuple[str, str],
                                                      tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    cfg = write_config(tmp_path / "cfg", extra=f'\n[gateway.tls]\ncert_file = "{cert}"\n'
                                               f'key_file = "{key}"\n')
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        context = ssl.create_default_context(cafile=str(cert))
        c = RemoteClient(edge.http_url.replace("127.0.0.1", "localhost"), token, http2=True,
                         verify=context)
        try:
            await c.initialize()
            assert c.init_response is not None
            assert c.init_response.http_version == "HTTP/2"
            assert "Secure" in c.init_response.headers["set-cookie"]
            async with c.stream() as stream:
                assert (await c.post(req("echo", {}, 3))).status_code == 202
                assert (await stream.next()).data["id"] == 3
        finally:
            await c.aclose()
        # (httpx put ALPN h2 on that context: a WebSocket client offers none, or http/1.1.)
        context = ssl.create_default_context(cafile=str(cert))
        async with connect(edge.url.replace("127.0.0.1", "localhost"), ssl=context, proxy=None,
                           additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(req("echo", {}, 4)))
            assert json.loads(await ws.recv())["id"] == 4


async def test_websocket_upgrade_names_its_connection_and_sets_the_cookie(
        tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        async with connect(edge.url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            assert ws.response is not None
            assert len(ws.response.headers["Acp-Connection-Id"]) == 36
            assert ws.response.headers["Set-Cookie"].startswith("acpgate_affinity=")
            await ws.send(json.dumps(req("echo", {}, 1)))
            assert json.loads(await ws.recv())["result"] == {"method": "echo"}


async def test_browsers_only_from_allowed_origins(tmp_path: Path,
                                                  services: tuple[str, str]) -> None:
    write_config(tmp_path / "cfg")
    cfg = _with(tmp_path / "cfg", 'allowed_origins = ["https://app.example"]\n')
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        # A page of another site: refused before anything else, on HTTP and WebSocket.
        evil = RemoteClient(edge.http_url, token, headers={"Origin": "https://evil.example"})
        try:
            r = await evil.post(req("initialize", {}, 0))
            assert r.status_code == 403
            assert "access-control-allow-origin" not in r.headers
            r = await evil.http.options(edge.http_url, headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
            assert r.status_code == 403
        finally:
            await evil.aclose()
        with pytest.raises(InvalidStatus) as info:
            async with connect(edge.url, proxy=None, origin="https://evil.example",  # type: ignore[arg-type]
                               additional_headers={"Authorization": f"Bearer {token}"}):
                pass
        assert info.value.response.status_code == 403
        # The listed origin: CORS on every answer, its preflight answered.
        good = RemoteClient(edge.http_url, token, headers={"Origin": "https://app.example"})
        try:
            r = await good.http.options(edge.http_url, headers={
                "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, acp-connection-id"})
            assert r.status_code == 204
            assert r.headers["access-control-allow-origin"] == "https://app.example"
            assert "acp-session-id" in r.headers["access-control-allow-headers"]
            await good.initialize()
            r0 = good.init_response
            assert r0 is not None
            assert r0.headers["access-control-allow-origin"] == "https://app.example"
            assert r0.headers["access-control-allow-credentials"] == "true"
            assert "Acp-Connection-Id" in r0.headers["access-control-expose-headers"]
        finally:
            await good.aclose()
        async with connect(edge.url, proxy=None, origin="https://app.example",  # type: ignore[arg-type]
                           additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps(req("echo", {}, 1)))
            assert json.loads(await ws.recv())["id"] == 1
        # No Origin at all (no browser): not bound by the list.
        plain = RemoteClient(edge.http_url, token)
        try:
            await plain.initialize()
        finally:
            await plain.aclose()


def _with(cfg_dir: Path, lines: str) -> Any:
    from services.common.config import load_config

    path = cfg_dir / "config.toml"
    path.write_text(path.read_text().replace("[gateway]\n", f"[gateway]\n{lines}"))
    return load_config(cfg_dir, environ={})


async def test_quiet_streams_get_keepalives(tmp_path: Path, services: tuple[str, str]) -> None:
    write_config(tmp_path / "cfg")
    cfg = _with(tmp_path / "cfg", "ping_interval_secs = 1\n")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        c = RemoteClient(edge.http_url, token)
        try:
            await c.initialize()
            async with c.stream() as stream:
                async for line in stream.lines:
                    if line.startswith(":"):
                        assert line == ": keepalive"
                        break
        finally:
            await c.aclose()


async def test_a_connection_without_streams_is_reaped(tmp_path: Path,
                                                      services: tuple[str, str]) -> None:
    write_config(tmp_path / "cfg")
    cfg = _with(tmp_path / "cfg", "idle_secs = 1\n")
    _, token = mint(cfg)
    dialect = ScriptDialect()
    async with running_edge(cfg, FakeRuntime(), services, dialect) as edge:
        kept, left = RemoteClient(edge.http_url, token), RemoteClient(edge.http_url, token)
        try:
            await kept.initialize()
            await left.initialize()
            async with kept.stream():
                # The one with no stream goes (its dialect ends: sessions released) …
                for _ in range(400):
                    if edge.connection_count == 1:
                        break
                    await asyncio.sleep(0.05)
                assert (await left.post(req("echo"))).status_code == 404
                assert dialect.finished == 1
                # … the one whose stream is open stays, however long it is quiet.
                assert (await kept.post(req("echo"))).status_code == 202
                assert edge.connection_count == 1
        finally:
            await kept.aclose()
            await left.aclose()


async def test_a_cut_stream_resumes_with_last_event_id(tmp_path: Path,
                                                       services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        c = RemoteClient(edge.http_url, token)
        try:
            await c.initialize()
            async with c.stream() as stream:
                assert (await c.post(req("emit", {"n": 10}, 1))).status_code == 202
                first = [await stream.next() for _ in range(4)]
            # Cut after event 4; more is sent while nobody reads.
            assert (await c.post(req("emit", {"n": 10}, 2))).status_code == 202
            async with c.stream(last_event_id=first[-1].id) as stream:
                rest = await stream.until(lambda d: d.get("id") == 2)
            seen = first + rest
            assert [int(e.id or 0) for e in seen] == list(range(1, len(seen) + 1))
            seqs = [e.data["params"]["seq"] for e in seen if "method" in e.data]
            assert seqs == list(range(10)) * 2  # nothing lost, nothing twice
            # Events beyond the replay buffer: a clear error event, then the oldest held.
            assert (await c.post(req("emit", {"n": REPLAY_EVENTS + 50}, 3))).status_code == 202
            async with c.stream() as stream:
                await stream.until(lambda d: d.get("id") == 3)
            async with c.stream(last_event_id="1") as stream:
                gap = await stream.next()
                assert gap.event == "error" and gap.id is None
                assert gap.data["method"] == "_acpgate/replay_gap"
                assert gap.data["params"]["lastEventId"] == "1"
                after = await stream.next()
                assert int(after.id or 0) == int(gap.data["params"]["missedTo"]) + 1
        finally:
            await c.aclose()


async def test_a_client_that_reads_no_stream_is_closed(tmp_path: Path,
                                                       services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect(), queue_chars=4096,
                            queue_messages=16, slow_client_timeout=0.5) as edge:
        c = RemoteClient(edge.http_url, token)
        try:
            await c.initialize()
            assert (await c.post(req("emit", {"n": 2000}, 1))).status_code == 202
            for _ in range(200):
                if edge.slow_client_closes:
                    break
                await asyncio.sleep(0.05)
            assert edge.slow_client_closes == 1
            assert (await c.post(req("echo"))).status_code == 404
            assert edge.connection_count == 0
            assert edge.http.peak_pending_chars <= 4096 + 200
        finally:
            await c.aclose()


async def test_a_reader_that_stops_reading_is_cut_off(tmp_path: Path,
                                                      services: tuple[str, str]) -> None:
    """A client that opens a stream and then reads nothing: its connection is closed as a
    slow client, and the stream's response is cut (the socket reset), not left writing."""
    cfg = write_config(tmp_path / "cfg")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect(), queue_chars=65536,
                            queue_messages=16, slow_client_timeout=0.5) as edge:
        c = RemoteClient(edge.http_url, token)
        try:
            await c.initialize()
            reader, writer = await asyncio.open_connection("127.0.0.1", edge.port)
            writer.write((f"GET /acp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                          f"Accept: text/event-stream\r\nAcp-Connection-Id: {c.connection_id}"
                          "\r\n\r\n").encode())
            await writer.drain()
            for _ in range(200):
                if edge.http.readers:
                    break
                await asyncio.sleep(0.05)
            # Far more than the socket buffers hold, never read.
            assert (await c.post(req("emit", {"n": 2000, "pad": 65536}, 1))).status_code == 202
            for _ in range(400):
                if edge.slow_client_closes and not edge.http.readers:
                    break
                await asyncio.sleep(0.05)
            assert edge.slow_client_closes == 1 and edge.http.readers == 0
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                while True:  # what was buffered, then the end of a cut connection
                    if not await asyncio.wait_for(reader.read(1 << 20), 10):
                        raise asyncio.IncompleteReadError(b"", None)
            writer.close()
        finally:
            await c.aclose()


async def test_unfinished_http2_bodies_are_bounded_together(tmp_path: Path,
                                                            services: tuple[str, str]) -> None:
    """128 streams may not hold 128 bodies: what unfinished requests of one HTTP/2
    connection hold together is bounded by max_frame_bytes (413 for the one past it)."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import ResponseReceived

    write_config(tmp_path / "cfg")
    cfg = _with(tmp_path / "cfg", "max_frame_bytes = 4096\n")
    _, token = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, ScriptDialect()) as edge:
        reader, writer = await asyncio.open_connection("127.0.0.1", edge.port)
        h2 = H2Connection(H2Configuration(client_side=True))
        h2.initiate_connection()
        statuses: dict[int, str] = {}
        for sid in (1, 3, 5):
            h2.send_headers(sid, [(":method", "POST"), (":path", "/acp"), (":scheme", "http"),
                                  (":authority", "x"), ("authorization", f"Bearer {token}"),
                                  ("content-type", "application/json")])
            h2.send_data(sid, b" " * 1800)  # none of them ends
        writer.write(h2.data_to_send())
        while not statuses:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "the server closed the connection"
            for event in h2.receive_data(data):
                if isinstance(event, ResponseReceived):
                    statuses[event.stream_id] = dict(event.headers)[b":status"].decode()
            writer.write(h2.data_to_send())
        assert statuses == {5: "413"}
        writer.close()
