"""Fixtures: a real session service on a real unix socket, and a stub to call it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from acpgate.session.v1 import session_pb2_grpc
from services.common.config import A2aSection, AcpSection, AgentSection, Config, PathsSection
from services.common.grpc_channel import open_channel
from services.common.grpc_server import RunningServer
from services.session.server import start_session_server

if TYPE_CHECKING:
    from acpgate.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub

    ServerFactory = Callable[[Config], Awaitable[tuple[RunningServer, Stub]]]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temp dir: unix socket paths must stay under ~108 bytes."""
    d = Path(tempfile.mkdtemp(prefix="acs-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def make_cfg(root: Path, *, a2a: A2aSection | None = None, default_agent: str = "alpha") -> Config:
    """A config with two built-in agents and one acp agent, data under ``root``."""
    return Config(
        config_dir=root / "cfg",
        acp=AcpSection(default_agent=default_agent),
        paths=PathsSection(data_dir=str(root / "data")),
        a2a=a2a or A2aSection(),
        agents={
            "alpha": AgentSection(alias="alpha", provider="demo", model="demo"),
            "beta": AgentSection(alias="beta", provider="demo", model="demo"),
            "ext": AgentSection(alias="ext", kind="acp", command="some-acp", args=("--x",)),
            "off": AgentSection(alias="off", provider="demo", model="demo", enabled=False),
        },
    )


@pytest.fixture
async def serve(short_dir: Path) -> AsyncIterator[ServerFactory]:
    """Start session servers (each on its own socket) and stop them all at the end."""
    started: list[tuple[RunningServer, grpc.aio.Channel]] = []

    async def factory(
        cfg: Config,
    ) -> tuple[RunningServer, Stub]:
        address = f"unix:{short_dir}/s{len(started)}.sock"
        running = await start_session_server(cfg, address)
        channel = open_channel(running.address)
        started.append((running, channel))
        return running, session_pb2_grpc.SessionServiceStub(channel)

    yield factory
    for running, channel in started:
        await channel.close(None)
        await running.stop(grace=0.2)


@pytest.fixture
async def stub(
    serve: ServerFactory, short_dir: Path
) -> Stub:
    """A stub to a server with the default test config."""
    cfg = make_cfg(short_dir)
    cfg.config_dir.mkdir(parents=True)
    _, s = await serve(cfg)
    return s
