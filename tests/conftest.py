"""Fixtures every test package may use: one throwaway PostgreSQL cluster per test session.

``pg_cluster`` starts the cluster (:mod:`tests.pg_cluster`) the first time a
test asks for it and removes it when the session ends; ``pg_url`` is a fresh,
empty database in it for one test. Without the PostgreSQL server binaries
those tests are skipped, saying why — and only then.
"""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import pytest

from tests.pg_cluster import Cluster, missing_reason, start_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's PostgreSQL cluster (started once, removed at the end)."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


async def create_database(cluster: Cluster) -> str:
    """A new empty database in ``cluster``; its name."""
    name = cluster.new_database_name()
    con = await asyncpg.connect(cluster.dsn())
    try:
        await con.execute(f'CREATE DATABASE "{name}"')
    finally:
        await con.close()
    return name


@pytest.fixture
async def pg_url(pg_cluster: Cluster) -> str:
    """The URL of a fresh, empty database (over the trusted unix socket)."""
    return pg_cluster.dsn(await create_database(pg_cluster))
