"""``[services] data_path`` through a real ``acpgate serve``.

``"auto"`` (the default): the lifecycle service serves its fd socket beside its unix
socket and the edge takes every adapter's pipes there — the lines never pass through
the lifecycle process. ``"grpc"``: no fd socket, every line over the Attach stream.
An edge that cannot reach the fd socket falls back to the stream, session unharmed.
Either way the session streams the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bench.transports import ws_peer
from services.common.config import Config
from tests.gateway.wsfixtures import free_port, mint, start_serve, wait_healthy, write_config
from tests.launches import DATA_PATH_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@asynccontextmanager
async def serving(root: Path, data_path: str) -> AsyncIterator[tuple[Config, int, str]]:
    """``acpgate serve`` on ``data_path`` (whatever the test run's): config, port, token."""
    port = free_port()
    cfg = write_config(root / "cfg", port=port)
    _, secret = mint(cfg)
    proc = await start_serve(root / "cfg", root / "serve.log", {DATA_PATH_ENV: data_path})
    try:
        await wait_healthy(port, proc)
        yield cfg, port, secret
    finally:
        proc.terminate()
        await proc.wait()


async def a_session_streams(port: int, secret: str, work: Path) -> None:
    """initialize, session/new, a prompt whose answer streams in."""
    ep = await ws_peer(f"ws://127.0.0.1:{port}/acp", secret)
    try:
        await ep.peer.request("initialize", {"protocolVersion": 1})
        sid = (await ep.peer.request("session/new", {"cwd": str(work), "mcpServers": []}))[
            "sessionId"]
        ep.peer.sink(sid).reset(1)
        result = await ep.peer.prompt(sid, "hello")
        assert result["stopReason"] == "end_turn"
        await asyncio.wait_for(ep.peer.sink(sid).done.wait(), 30)
    finally:
        await ep.close()


def fd_socket(cfg: Config) -> Path:
    return cfg.data_dir / "run" / "lifecycle.fds.sock"


@pytest.mark.parametrize("data_path", ["auto", "grpc"])
async def test_the_data_path_is_the_configured_one(tmp_path: Path, data_path: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with serving(tmp_path, data_path) as (cfg, port, secret):
        assert fd_socket(cfg).exists() is (data_path == "auto")
        await a_session_streams(port, secret, work)
    log = (tmp_path / "serve.log").read_text()
    assert ("fd_pipes_handed_over" in log) is (data_path == "auto")
    assert "adapter_pipes_not_taken" not in log
    assert not fd_socket(cfg).exists()  # removed at stop


async def test_an_edge_that_cannot_reach_the_fd_socket_uses_the_stream(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with serving(tmp_path, "auto") as (cfg, port, secret):
        fd_socket(cfg).unlink()
        await a_session_streams(port, secret, work)
    log = (tmp_path / "serve.log").read_text()
    assert "adapter_pipes_not_taken" in log and "fd_pipes_handed_over" not in log
