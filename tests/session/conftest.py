"""Fixtures: a real session service on a real unix socket, a stub to call it, and the store
backends (SQLite and PostgreSQL) every store test runs against."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import grpc
import pytest

from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.config import (
    A2aSection,
    AcpSection,
    AgentSection,
    Config,
    PathsSection,
    StoreSection,
)
from services.common.grpc_server import RunningServer
from services.session.api.server import start_session_server
from services.session.store import Clock, SessionStore, open_store
from services.session.store.opening import StoreTarget
from services.session.store.postgres.db import PostgresTarget
from tests.conftest import fresh_url

if TYPE_CHECKING:
    from acpgate_contracts.session.v1.session_pb2_grpc import SessionServiceAsyncStub as Stub

    ServerFactory = Callable[[Config], Awaitable[tuple[RunningServer, Stub]]]


#: The store backends; a test using ``backend`` (or ``store``) runs once per entry.
BACKENDS = ("sqlite", "postgresql")


class FakeClock:
    """A millisecond clock the test moves by hand."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Backend:
    """One store backend on one fresh database; :meth:`open` may be called many times and
    every store it opens (another connection to the same database) is closed at the end."""

    def __init__(self, name: str, request: pytest.FixtureRequest, root: Path) -> None:
        self.name = name
        self._request = request
        self._root = root
        self._target: StoreTarget = None
        self._opened: list[SessionStore] = []

    async def target(self) -> StoreTarget:
        """The database: a file under the test's temp dir, or a new PostgreSQL database."""
        if self._target is None:
            if self.name == "sqlite":
                self._target = self._root / "sessions" / "acp-sessions.db"
            else:
                cluster = self._request.getfixturevalue("pg_cluster")
                self._target = PostgresTarget(await fresh_url(cluster), connect_timeout_secs=5)
        return self._target

    async def store_section(self) -> StoreSection:
        """``[store]`` for a service on this backend: SQLite in the data dir (default), or
        this backend's PostgreSQL database."""
        if self.name == "sqlite":
            return StoreSection()
        target = await self.target()
        assert isinstance(target, PostgresTarget)
        return StoreSection(url=target.url, connect_timeout_secs=5)

    async def open(self, clock: Clock | None = None) -> SessionStore:
        """A store on this backend's database (persistent; the test fails otherwise)."""
        store = await open_store(await self.target(), clock=clock or FakeClock())
        self._opened.append(store)
        assert store.persistent, store.status.fallback_reason
        return store

    async def count(self, sql: str) -> int:
        """One integer from ``sql`` run on the database directly (not through a store)."""
        target = await self.target()
        if isinstance(target, PostgresTarget):
            con = await asyncpg.connect(target.url)
            try:
                return int(await con.fetchval(sql))
            finally:
                await con.close()
        assert isinstance(target, Path)

        def read() -> int:
            with contextlib.closing(sqlite3.connect(target)) as con:
                return int(con.execute(sql).fetchone()[0])

        return await asyncio.to_thread(read)

    async def close(self) -> None:
        for store in self._opened:
            await store.close()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Each store backend in turn (PostgreSQL: skipped only without its binaries)."""
    b = Backend(str(request.param), request, tmp_path)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def store(backend: Backend) -> SessionStore:
    """A store on each backend, on a fake clock."""
    return await backend.open(FakeClock())


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temp dir: unix socket paths must stay under ~108 bytes."""
    d = Path(tempfile.mkdtemp(prefix="acs-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def make_cfg(root: Path, *, a2a: A2aSection | None = None, default_agent: str = "alpha",
             store: StoreSection | None = None) -> Config:
    """A config with two built-in agents and one acp agent, data under ``root``."""
    return Config(
        config_dir=root / "cfg",
        acp=AcpSection(default_agent=default_agent),
        paths=PathsSection(data_dir=str(root / "data")),
        store=store or StoreSection(),
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
        channel = running.dial()
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
    """A stub to a server with the default test config (SQLite)."""
    cfg = make_cfg(short_dir)
    cfg.config_dir.mkdir(parents=True)
    _, s = await serve(cfg)
    return s


@pytest.fixture
async def store_section(backend: Backend) -> StoreSection:
    """``[store]`` of each backend in turn (for tests that build their own config)."""
    return await backend.store_section()


@pytest.fixture
async def store_stub(serve: ServerFactory, short_dir: Path, store_section: StoreSection) -> Stub:
    """A stub to a server with the default test config, on each store backend in turn."""
    cfg = make_cfg(short_dir, store=store_section)
    cfg.config_dir.mkdir(parents=True)
    _, s = await serve(cfg)
    return s
