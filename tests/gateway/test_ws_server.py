"""The WebSocket gateway itself (SPEC §11) over a small test dialect.

These tests pin the gateway's own jobs — routing, auth before upgrade,
subprotocol, `?agent=`, limits, slow-client backpressure, /healthz, /metrics —
with real sockets, a real token store and real gRPC servers; the full dialect
runs in test_gateway_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from services.edge.caller import Caller
from services.edge.tokens import TokenStore, token_db_path
from services.edge.transport.outqueue import SLOW_CLIENT_CLOSE_CODE, OutgoingQueue, PutResult
from tests.launches import config_environ

from .wsfixtures import (
    FakeRuntime,
    frames_until,
    http_get,
    mint,
    running_edge,
    stand_in_services,
    write_config,
)

pytestmark = pytest.mark.timeout(60)


class EchoDialect:
    """Answers `whoami` with the connection's default agent; `flood` sends big frames."""

    def __init__(self) -> None:
        self.finished = 0
        self.flood_results: list[int] = []

    async def __call__(self, runtime: Any, incoming: AsyncIterator[str],
                       send: Callable[[str], Awaitable[None]], *, default_agent: str = "",
                       caller: Caller, remote: bool = False, send_many: Any = None,
                       revoked: Any = None, stopping: asyncio.Event | None = None) -> None:
        try:
            async for line in frames_until(incoming, stopping):
                msg = json.loads(line)
                if msg["method"] == "whoami":
                    await send(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                           "result": {"agent": default_agent,
                                                      "principal": caller.principal,
                                                      "operator": caller.operator,
                                                      "remote": remote}}))
                elif msg["method"] == "flood":
                    sent = 0
                    chunk = "x" * 65536
                    for _ in range(msg["params"]["n"]):
                        await send(chunk)
                        sent += 1
                    self.flood_results.append(sent)
        finally:
            self.finished += 1


async def whoami(ws: Any, field: str = "agent") -> str:
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "whoami"}))
    return str(json.loads(await ws.recv())["result"][field])


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    async with stand_in_services(tmp_path, [lifecycle_pb2.LEASE_STATE_OPEN,
                                            lifecycle_pb2.LEASE_STATE_OPEN,
                                            lifecycle_pb2.LEASE_STATE_CLOSED]) as addrs:
        yield addrs


async def expect_status(url: str, status: int, **kw: Any) -> None:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, proxy=None, **kw):
            pass
    assert info.value.response.status_code == status


async def test_auth_matrix(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    token_id, secret = mint(cfg)
    _, other = mint(cfg, "other")
    dialect = EchoDialect()
    async with running_edge(cfg, FakeRuntime(), services, dialect) as edge:
        url = edge.url
        # Each source admits a valid token.
        async with connect(url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            assert await whoami(ws) == ""
        async with connect(url, proxy=None, subprotocols=["zeroclaw.acp.v1", f"bearer.{secret}"]) as ws:  # type: ignore[list-item]
            assert ws.subprotocol == "zeroclaw.acp.v1"
            assert await whoami(ws) == ""
        async with connect(f"{url}?token={secret}", proxy=None) as ws:
            assert await whoami(ws) == ""
        # Only the bearer entry offered (a browser): it is echoed, as browsers require.
        async with connect(url, proxy=None, subprotocols=[Subprotocol(f"bearer.{secret}")]) as ws:
            assert ws.subprotocol == f"bearer.{secret}"
        # Missing and wrong tokens: 401, never upgraded (the dialect never ran for them).
        before = dialect.finished
        await expect_status(url, 401)
        await expect_status(url, 401, additional_headers={"Authorization": f"Bearer {secret}x"})
        await expect_status(url, 401, subprotocols=["bearer.nope"])
        await expect_status(f"{url}?token=nope", 401)
        await expect_status(url, 401, additional_headers={"Authorization": f"Basic {secret}"})
        # A wrong header token is not rescued by a right query token (first source wins).
        await expect_status(f"{url}?token={secret}", 401,
                            additional_headers={"Authorization": "Bearer wrong"})
        # Revoked: refused from the next handshake on; the other token still works.
        assert TokenStore(token_db_path(cfg)).revoke(token_id)
        await expect_status(url, 401, additional_headers={"Authorization": f"Bearer {secret}"})
        async with connect(url, proxy=None, additional_headers={"Authorization": f"Bearer {other}"}) as ws:
            assert await whoami(ws) == ""
        assert dialect.finished == before + 1


async def test_unauthorized_body_and_no_token_in_logs(
    tmp_path: Path, services: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{edge.url}?token={secret}x", proxy=None):
                pass
        assert info.value.response.headers["WWW-Authenticate"].startswith("Bearer")
        assert secret not in info.value.response.body.decode()
        async with connect(f"{edge.url}?token={secret}", proxy=None) as ws:
            await whoami(ws)
    assert secret not in caplog.text


async def test_require_auth_false_admits_without_token(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg", extra="")
    (tmp_path / "cfg" / "config.toml").write_text(
        (tmp_path / "cfg" / "config.toml").read_text().replace(
            "[gateway]\n", "[gateway]\nrequire_auth = false\n"))
    from services.common.config import load_config
    cfg = load_config(tmp_path / "cfg", environ=config_environ())
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        async with connect(edge.url, proxy=None) as ws:
            assert await whoami(ws) == ""


async def test_paths_prefix_and_agent_default(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg", prefix="/gw")
    _, secret = mint(cfg)
    auth = {"Authorization": f"Bearer {secret}"}
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        base = f"ws://127.0.0.1:{edge.port}"
        assert edge.url.endswith("/gw/acp")
        await expect_status(f"{base}/acp", 404, additional_headers=auth)
        await expect_status(f"{base}/gw/other", 404, additional_headers=auth)
        async with connect(f"{base}/gw/acp?agent=helper", proxy=None, additional_headers=auth) as ws:
            assert ws.subprotocol is None  # nothing offered, nothing selected
            assert await whoami(ws) == "helper"
        async with connect(f"{base}/gw/acp?agent=%20%20", proxy=None, additional_headers=auth) as ws:
            assert await whoami(ws) == ""  # blank = absent


async def test_connection_acts_as_its_token(tmp_path: Path, services: tuple[str, str]) -> None:
    """Each token is its own principal (`client:<token id>`); auth off = the local operator.
    Either way it is a remote client, never the local stdio user (its mcpServers)."""
    cfg = write_config(tmp_path / "cfg")
    tid, secret = mint(cfg)
    tid2, secret2 = mint(cfg, "other")
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        for token_id, tok in ((tid, secret), (tid2, secret2)):
            async with connect(f"{edge.url}?token={tok}", proxy=None) as ws:
                assert await whoami(ws, "principal") == f"client:{token_id}"
                assert await whoami(ws, "operator") == "False"
                assert await whoami(ws, "remote") == "True"
    open_cfg = replace(cfg, gateway=replace(cfg.gateway, require_auth=False))
    async with running_edge(open_cfg, FakeRuntime(), services, EchoDialect()) as edge:
        async with connect(edge.url, proxy=None) as ws:
            assert await whoami(ws, "principal") == "local"
            assert await whoami(ws, "operator") == "True"
            assert await whoami(ws, "remote") == "True"


async def test_max_connections(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg", max_connections=1)
    _, secret = mint(cfg)
    auth = {"Authorization": f"Bearer {secret}"}
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        async with connect(edge.url, proxy=None, additional_headers=auth) as ws:
            assert await whoami(ws) == ""
            await expect_status(edge.url, 503, additional_headers=auth)
        # The slot is free again once the first connection is gone.
        for _ in range(100):
            if edge.connection_count == 0:
                break
            await asyncio.sleep(0.02)
        async with connect(edge.url, proxy=None, additional_headers=auth) as ws:
            assert await whoami(ws) == ""


async def test_max_frame_size(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg", extra="")
    text = (tmp_path / "cfg" / "config.toml").read_text().replace(
        "[gateway]\n", "[gateway]\nmax_frame_bytes = 4096\n")
    (tmp_path / "cfg" / "config.toml").write_text(text)
    from services.common.config import load_config
    cfg = load_config(tmp_path / "cfg", environ=config_environ())
    _, secret = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        async with connect(edge.url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            await ws.send("x" * 5000)
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            assert info.value.rcvd is not None and info.value.rcvd.code == 1009


async def test_slow_client_is_closed_and_memory_bounded(
    tmp_path: Path, services: tuple[str, str]
) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    dialect = EchoDialect()
    budget = 1024 * 1024
    async with running_edge(cfg, FakeRuntime(), services, dialect, queue_chars=budget,
                            slow_client_timeout=0.5, close_timeout=0.5) as edge:
        # A client that never reads: tiny receive queue so its socket stops draining too.
        ws = await connect(edge.url, proxy=None, max_queue=1, max_size=None, compression=None,
                           additional_headers={"Authorization": f"Bearer {secret}"})
        n = 4000  # 250 MiB if nothing pushed back
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "flood", "params": {"n": n}}))
        for _ in range(500):
            if dialect.finished:
                break
            await asyncio.sleep(0.05)
        assert dialect.finished == 1  # the connection was closed by the server
        assert dialect.flood_results and dialect.flood_results[0] == n  # sends returned, dropped
        # Never more than the budget plus one message was held for this client.
        assert 0 < edge.peak_queue_chars <= budget + 65536
        ws.transport.abort()
        assert edge.connection_count == 0
        _, _, body = await http_get(f"http://127.0.0.1:{edge.port}/metrics")
        assert "acpgate_ws_slow_client_closes_total 1" in body


async def test_slow_client_sees_close_code(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    _, secret = mint(cfg)
    dialect = EchoDialect()
    async with running_edge(cfg, FakeRuntime(), services, dialect, queue_chars=256 * 1024,
                            slow_client_timeout=0.3, close_timeout=2.0) as edge:
        ws = await connect(edge.url, proxy=None, max_queue=1, max_size=None, compression=None,
                           additional_headers={"Authorization": f"Bearer {secret}"})
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "flood", "params": {"n": 2000}}))
        for _ in range(400):
            if edge.slow_client_closes:
                break
            await asyncio.sleep(0.02)
        assert edge.slow_client_closes == 1
        # The client wakes up and reads everything: the stream ends with the slow-client close (or an abort).
        code = None
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
        assert code == SLOW_CLIENT_CLOSE_CODE
        for _ in range(200):
            if dialect.finished:
                break
            await asyncio.sleep(0.02)
        assert dialect.finished == 1


async def test_outgoing_queue_bounds() -> None:
    q = OutgoingQueue(max_chars=10, max_messages=3)
    assert await q.put("x" * 50, 0.01) is PutResult.QUEUED  # alone, any size passes
    assert await q.put("y", 0.01) is PutResult.TIMED_OUT
    assert await q.get() == "x" * 50
    for m in ("a", "b", "c"):
        assert await q.put(m, 0.01) is PutResult.QUEUED
    assert await q.put("d", 0.01) is PutResult.TIMED_OUT  # message count bound
    waiter = asyncio.create_task(q.put("d", 5))
    await asyncio.sleep(0)
    assert await q.get() == "a"
    assert await waiter is PutResult.QUEUED
    assert q.peak_chars <= 50
    await q.close()
    assert await q.get() is None
    assert await q.put("z", 1) is PutResult.CLOSED


async def test_healthz_and_metrics(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg")
    runtime = FakeRuntime()
    runtime.metrics.turns_total = 7
    runtime.metrics.count_error(-32000)
    async with running_edge(cfg, runtime, services, EchoDialect()) as edge:
        base = f"http://127.0.0.1:{edge.port}"
        status, ctype, body = await http_get(base + "/healthz")
        assert status == 200 and ctype == "application/json"
        assert json.loads(body) == {"status": "ok", "edge": "SERVING",
                                    "services": {"session": "SERVING", "lifecycle": "SERVING"}}
        status, ctype, body = await http_get(base + "/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert "acpgate_turns_total 7" in body
        assert 'acpgate_errors_total{code="-32000"} 1' in body
        assert 'acpgate_leases{state="open"} 2' in body
        assert 'acpgate_leases{state="closed"} 1' in body
        assert 'acpgate_leases{state="lost"} 0' in body
        assert 'acpgate_service_up{service="session"} 1' in body
        status, _, _ = await http_get(base + "/nope")
        assert status == 404


async def test_healthz_degraded_when_a_service_is_down(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg")
    missing = (f"unix:{tmp_path}/none-s.sock", f"unix:{tmp_path}/none-l.sock")
    async with running_edge(cfg, FakeRuntime(), missing, EchoDialect()) as edge:
        status, _, body = await http_get(f"http://127.0.0.1:{edge.port}/healthz")
        assert status == 503
        assert json.loads(body)["services"]["session"] == "UNREACHABLE"


async def test_tls(tmp_path: Path, services: tuple[str, str], tls_files: tuple[Path, Path]) -> None:
    import ssl

    cert, key = tls_files
    cfg = write_config(tmp_path / "cfg", extra=f'\n[gateway.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n')
    assert cfg.gateway.tls.enabled
    _, secret = mint(cfg)
    async with running_edge(cfg, FakeRuntime(), services, EchoDialect()) as edge:
        assert edge.url.startswith("wss://")
        context = ssl.create_default_context(cafile=str(cert))
        async with connect(edge.url, proxy=None, ssl=context,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            assert await whoami(ws) == ""


async def test_keepalive_drops_a_silent_client(tmp_path: Path, services: tuple[str, str]) -> None:
    cfg = write_config(tmp_path / "cfg", extra="")
    text = (tmp_path / "cfg" / "config.toml").read_text().replace(
        "[gateway]\n", "[gateway]\nping_interval_secs = 1\n")
    (tmp_path / "cfg" / "config.toml").write_text(text)
    from services.common.config import load_config
    cfg = load_config(tmp_path / "cfg", environ=config_environ())
    _, secret = mint(cfg)
    dialect = EchoDialect()
    async with running_edge(cfg, FakeRuntime(), services, dialect, close_timeout=0.5) as edge:
        ws = await connect(edge.url, proxy=None, ping_interval=None,
                           additional_headers={"Authorization": f"Bearer {secret}"})
        assert await whoami(ws) == ""
        ws.transport.pause_reading()  # the peer stops answering pings (a dead network path)
        # (the dialect ends first, then the connection's bookkeeping: wait for both)
        for _ in range(200):
            if dialect.finished and edge.connection_count == 0:
                break
            await asyncio.sleep(0.05)
        assert dialect.finished == 1, "the gateway dropped the connection after a missed pong"
        assert edge.connection_count == 0
        ws.transport.abort()
