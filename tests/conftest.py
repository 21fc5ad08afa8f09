"""Fixtures every test package may use.

- One throwaway PostgreSQL cluster per test session: ``pg_cluster`` starts the
  cluster (:mod:`tests.pg_cluster`) the first time a test asks for it and removes
  it when the session ends; ``pg_url`` is a fresh, empty schema in it for one test
  (:func:`fresh_url`). Without the PostgreSQL server binaries those tests are
  skipped, saying why — and only then.
- One real edge runtime per test module (``loop``, ``runtime``), for the in-process
  edge tests and the shared JSON-RPC table in ``tests/common``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from acpgate import __version__
from acpgate.embedded import start_embedded
from services.common.config import load_config
from services.edge.transport.connection import EdgeRuntime, open_runtime
from tests.e2e.harness import write_config
from tests.launches import config_environ
from tests.pg_cluster import Cluster, missing_reason, start_cluster


def pytest_configure(config: pytest.Config) -> None:
    """The CLIs the tests run fit their tables to ``COLUMNS``: read at their fallback width
    (120), whatever terminal or test worker started the run."""
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


#: The database the tests' stores live in, one schema per test.
TEST_DATABASE = "acpgate_tests"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's PostgreSQL cluster (started once, removed at the end)."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = start_cluster()
    try:
        cluster.create_database(TEST_DATABASE)
        yield cluster
    finally:
        cluster.stop()


async def fresh_url(cluster: Cluster, *, tcp: bool = False, port: int = 0) -> str:
    """The URL of a new, empty schema of the test database: as good as a fresh database for
    a store (its tables go there), a hundred times cheaper to make."""
    schema = cluster.new_name()
    con = await asyncpg.connect(cluster.dsn(TEST_DATABASE))
    try:
        await con.execute(f'CREATE SCHEMA "{schema}"')
    finally:
        await con.close()
    return cluster.dsn(TEST_DATABASE, schema=schema, tcp=tcp, port=port)


@pytest.fixture
async def pg_url(pg_cluster: Cluster) -> str:
    """The URL of a fresh, empty store (over the trusted unix socket)."""
    return await fresh_url(pg_cluster)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop the module's runtime lives on (tests drive it synchronously)."""
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def runtime(loop: asyncio.AbstractEventLoop,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeRuntime]:
    """A real edge runtime with embedded services, on the harness config."""
    cfg_dir = write_config(tmp_path_factory.mktemp("edge") / "cfg")
    rt = loop.run_until_complete(open_runtime(load_config(Path(cfg_dir), environ=config_environ()),
                                              version=__version__,
                                              start_services=start_embedded))
    yield rt
    loop.run_until_complete(rt.close())
