"""What only the PostgreSQL store has: its URL and login, waiting for the server, the
memory fallback when the database cannot be used (SPEC §2), and a lost connection.

A real throwaway cluster (``pg_cluster``); nothing here is mocked. The store
contract itself runs on every backend in ``test_store.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.common.urls import redact_url
from services.session.store import (
    LATEST_SCHEMA_VERSION,
    HistoryEntry,
    NewSession,
    PostgresTarget,
    SessionActiveElsewhere,
    SessionStore,
    StoreUnavailable,
    StoreUnusable,
    TurnUsage,
    open_store,
)
from services.session.store.event_log import EventChunk, LoggedEvent, SessionBatch, TurnMark
from services.session.store.postgres.schema import _STEPS, _V4_TABLES
from services.session.store.postgres.store import PostgresSessionStore
from tests.conftest import fresh_url
from tests.pg_cluster import Cluster
from tests.session.old_rows import CHILD, OLD_ROWS, RAN, SPAWNED


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def _opened(target: PostgresTarget) -> AsyncIterator[SessionStore]:
    store = await open_store(target)
    try:
        yield store
    finally:
        await store.close()


async def _assert_memory(store: SessionStore, *parts: str, secret: str = "") -> None:
    assert not store.persistent and store.status.db_path == ""
    for part in parts:
        assert part in store.status.fallback_reason, store.status.fallback_reason
    if secret:
        assert secret not in store.status.fallback_reason
    await store.create_session(NewSession("m", "a", "/w"))  # memory mode still works
    assert (await store.get_session("m")).workspace_dir == "/w"


def test_redact_url_drops_every_secret() -> None:
    """The only form of the URL that is shown or logged carries no password."""
    assert redact_url("postgresql://u:s3cret@db:5432/acp") == "postgresql://u@db:5432/acp"
    assert redact_url("postgres://u@/acp?host=/run/pg&password=s3cret&sslmode=require") == (
        "postgres://u@/acp?host=%2Frun%2Fpg&sslmode=require")
    assert "s3cret" not in redact_url("postgresql://u:s3cret@h/d?passfile=/p&sslpassword=s3cret")
    assert redact_url("postgresql://h/d") == "postgresql://h/d"


async def test_schema_is_created_at_the_latest_version(pg_url: str) -> None:
    """An empty database gets the tables, the claim columns, the adapter capabilities table
    and the shared version number."""
    async with _opened(PostgresTarget(pg_url)) as store:
        assert store.persistent and store.status.backend == "postgresql"
        assert store.status.schema_version == LATEST_SCHEMA_VERSION
        assert store.status.db_path == redact_url(pg_url)
    con = await asyncpg.connect(pg_url)
    try:
        assert await con.fetchval("SELECT version FROM schema_version") == LATEST_SCHEMA_VERSION
        columns = {r[0] for r in await con.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'sessions'")}
        assert {"active_instance_id", "active_host", "active_until", "last_seq"} <= columns
        assert await con.fetchval("SELECT to_regclass('agent_capabilities') IS NOT NULL")
        await con.execute("INSERT INTO sessions (id, workspace_dir, created_at, last_activity)"
                          " VALUES ('x', '/w', 0, 0)")
        with pytest.raises(asyncpg.CheckViolationError):
            await con.execute("INSERT INTO history (session_id, seq, turn, role, created_at)"
                              " VALUES ('x', 1, 1, 'system', 0)")
    finally:
        await con.close()
    # Reopening does not migrate again and keeps the rows.
    async with _opened(PostgresTarget(pg_url)) as store:
        assert (await store.get_session("x")).workspace_dir == "/w"


async def test_v4_database_keeps_its_claims_and_gains_the_issue_17_tables(
        pg_cluster: Cluster) -> None:
    """v4 → v5 → v6: a database as v4 shipped it (claims, no capability
    table) keeps its rows, history and live claims, gets the agent_capabilities table (v5),
    and every row no extra roots, mode, config or token totals, its old turns no usage (v6)."""
    url = await fresh_url(pg_cluster)
    con = await asyncpg.connect(url)
    try:
        for stmt in _V4_TABLES:
            await con.execute(stmt)
        await con.execute("INSERT INTO schema_version VALUES (4)")
        await con.execute(
            "INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity,"
            " token_count, title, last_seq, last_turn, active_instance_id, active_host,"
            " active_until) VALUES ('old', 'a', '/w', 0, 0, 9, 't', 1, 1, 'gw-a', 'a',"
            " 9000000000000)")
        await con.execute("INSERT INTO history (session_id, seq, turn, role, text, created_at)"
                          " VALUES ('old', 1, 1, 'user', 'hi', 1)")
    finally:
        await con.close()
    async with _opened(PostgresTarget(url)) as store:
        assert store.persistent and store.status.schema_version == LATEST_SCHEMA_VERSION == 12
        rec = await store.get_session("old")
        assert rec.forked_from == ""  # v8: no stored row is a fork
        assert not rec.subagent  # v11: nor a subagent
        assert rec.claim.public_url == ""  # v9: no address recorded
        assert (rec.claim.instance_id, rec.claim.host, rec.claim.generation) == ("gw-a", "a", 1)
        assert rec.stored_bytes == len("user") + len("hi")  # v7: counted from its history
        # The claim was kept: live while its host is (its session service vouches for it).
        await store.hold_liveness("gw-a")
        with pytest.raises(SessionActiveElsewhere):
            await store.claim("old", "gw-b", ttl_ms=1000)
        await store.set_agent_capabilities("alpha", '{"loadSession": true}')
        assert await store.get_agent_capabilities("alpha") == '{"loadSession": true}'
        assert (rec.token_count, rec.title, rec.message_count) == (9, "t", 1)
        assert (rec.additional_directories, rec.mode_id, rec.config_json) == ((), "", "")
        assert (rec.input_tokens, rec.output_tokens) == (0, 0)
        await store.append_turn("old", [HistoryEntry(role="user", text="more")],
                                usage=TurnUsage(input_tokens=2, output_tokens=3))
        rec = await store.get_session("old")
        assert (rec.input_tokens, rec.output_tokens, rec.message_count) == (2, 3, 2)


async def test_v8_database_keeps_its_live_claim_and_gains_the_claim_url(
        pg_cluster: Cluster) -> None:
    """v8 → v9: a database as v8 shipped it (v4 created, every step up to v8
    run) keeps its live claim, generation and history; the claim records no public URL
    until its holder claims again, and that claim records one."""
    url = await fresh_url(pg_cluster)
    con = await asyncpg.connect(url)
    try:
        for stmt in _V4_TABLES:
            await con.execute(stmt)
        for version in range(4, 8):
            await _STEPS[version][1](con)
        await con.execute("INSERT INTO schema_version VALUES (8)")
        await con.execute(
            "INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity,"
            " token_count, title, last_seq, last_turn, active_instance_id, active_host,"
            " active_until, claim_generation) VALUES ('old', 'a', '/w', 0, 0, 9, 't', 1, 1,"
            " 'gw-a', 'a', 9000000000000, 3)")
        await con.execute("INSERT INTO history (session_id, seq, turn, role, text, created_at)"
                          " VALUES ('old', 1, 1, 'user', 'hi', 1)")
    finally:
        await con.close()
    async with _opened(PostgresTarget(url)) as store:
        assert store.persistent and store.status.schema_version == LATEST_SCHEMA_VERSION == 12
        rec = await store.get_session("old")
        assert (rec.claim.instance_id, rec.claim.host, rec.claim.generation) == ("gw-a", "a", 3)
        assert rec.claim.public_url == ""
        # The claim was kept: live while its host is (its session service vouches for it).
        await store.hold_liveness("gw-a")
        with pytest.raises(SessionActiveElsewhere):
            await store.claim("old", "gw-b", ttl_ms=1000)
        assert [e.text async for e in store.iter_history("old")] == ["hi"]
        again = await store.claim("old", "gw-a", ttl_ms=1000, public_url="wss://a.example/acp")
        assert (again.claim.generation, again.claim.public_url) == (4, "wss://a.example/acp")
    con = await asyncpg.connect(url)
    try:
        assert await con.fetchval("SELECT version FROM schema_version") == 12
    finally:
        await con.close()


async def test_v10_database_gains_the_subagent_mark(pg_cluster: Cluster) -> None:
    """v10 → v11: a database as v10 shipped it (v4 created, every step up to v10 run)
    keeps its rows and history; no row is marked a subagent, and a new child row is."""
    url = await fresh_url(pg_cluster)
    con = await asyncpg.connect(url)
    try:
        for stmt in _V4_TABLES:
            await con.execute(stmt)
        for version in range(4, 10):
            await _STEPS[version][1](con)
        await con.execute("INSERT INTO schema_version VALUES (10)")
        await con.execute(
            "INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity,"
            " title, last_seq, last_turn, session_key) VALUES ('old', 'a', '/w', 0, 0, 't',"
            " 1, 1, 'agent:a:acp:old')")
        await con.execute("INSERT INTO history (session_id, seq, turn, role, text, created_at)"
                          " VALUES ('old', 1, 1, 'user', 'hi', 1)")
    finally:
        await con.close()
    async with _opened(PostgresTarget(url)) as store:
        assert store.persistent and store.status.schema_version == LATEST_SCHEMA_VERSION == 12
        rec = await store.get_session("old")
        assert not rec.subagent and (rec.title, rec.message_count) == ("t", 1)
        assert [e.text async for e in store.iter_history("old")] == ["hi"]
        key = rec.ownership.session_key
        child = await store.create_session(NewSession(
            "c1", "a", "/w", spawned_by=key, parent_session_key=key, owner_session_key=key,
            state="inactive", subagent=True))
        assert child.subagent and (await store.get_session("c1")).subagent
    con = await asyncpg.connect(url)
    try:
        assert await con.fetchval("SELECT version FROM schema_version") == 12
    finally:
        await con.close()


async def test_v11_database_marks_its_old_children_and_records_no_protocol(
        pg_cluster: Cluster) -> None:
    """v11 → v12: as SQLite's — only the child row stored before the subagent mark is
    marked (by the id acpgate gives a child); no row has a protocol version recorded, one
    written after is read back."""
    url = await fresh_url(pg_cluster)
    con = await asyncpg.connect(url)
    try:
        for stmt in _V4_TABLES:
            await con.execute(stmt)
        for version in range(4, 11):
            await _STEPS[version][1](con)
        await con.execute("INSERT INTO schema_version VALUES (11)")
        await con.execute(OLD_ROWS)
    finally:
        await con.close()
    async with _opened(PostgresTarget(url)) as store:
        assert store.status.schema_version == LATEST_SCHEMA_VERSION == 12
        marked = {sid: (await store.get_session(sid)).subagent
                  for sid in ("top", CHILD, SPAWNED, RAN)}
        assert marked == {"top": False, CHILD: True, SPAWNED: False, RAN: False}
        assert {(await store.get_session(sid)).protocol_version for sid in marked} == {0}
        rec = await store.update_session("top", protocol_version=2)
        assert rec.protocol_version == 2 == (await store.get_session("top")).protocol_version


async def test_the_event_log_is_compressed_with_lz4_where_the_server_can(
        pg_url: str) -> None:
    """The log's payloads compress with lz4 (cheaper on the server's CPU than pglz), set at
    open; a database made with pglz gets it at its next open and reads its rows back."""
    big = EventChunk(1, 2, 0, "update", b"x" * 5000 + b"\n" + b"y" * 5000, 1)
    con = await asyncpg.connect(pg_url)
    try:
        try:
            await con.execute("SET default_toast_compression = lz4")
        except asyncpg.InvalidParameterValueError:
            pytest.skip("this PostgreSQL was built without lz4")
        async with _opened(PostgresTarget(pg_url)) as store:
            await store.create_session(NewSession("s", "a", "/w"))
            assert await store.append_events([SessionBatch("s", chunks=[big])]) == [""]
        assert await con.fetchval("SELECT pg_column_compression(payload) FROM event_chunks"
                                  " WHERE first_event_id = 1") == "lz4"
        await con.execute("ALTER TABLE event_chunks ALTER COLUMN payload"
                          " SET COMPRESSION pglz")
        await con.execute("UPDATE event_chunks SET payload = payload || ''::bytea")
        assert await con.fetchval("SELECT pg_column_compression(payload) FROM event_chunks"
                                  ) == "pglz"
        async with _opened(PostgresTarget(pg_url)) as store:
            assert await store.append_events([SessionBatch("s", chunks=[
                EventChunk(3, 3, 0, "update", b"z" * 9000, 1)])]) == [""]
            assert [len(e.payload) async for page in store.iter_events("s") for e in page
                    ] == [5000, 5000, 9000]
        assert [r[0] for r in await con.fetch(
            "SELECT pg_column_compression(payload) FROM event_chunks ORDER BY first_event_id"
        )] == ["pglz", "lz4"]
    finally:
        await con.close()


async def test_password_from_the_target_not_the_url(pg_cluster: Cluster) -> None:
    """TCP asks for a password: the one given apart from the URL (``[store] password_env``)
    is used, and neither the status nor a refusal ever shows it."""
    url = await fresh_url(pg_cluster, tcp=True)
    async with _opened(PostgresTarget(url, password=pg_cluster.password)) as store:
        assert store.persistent and pg_cluster.password not in store.status.db_path
    started = time.monotonic()
    async with _opened(PostgresTarget(url, password="wrong", connect_timeout_secs=30)) as store:
        await _assert_memory(store, "password authentication failed", redact_url(url),
                             secret="wrong")
    assert time.monotonic() - started < 10, "a refused login is final: no retrying for 30 s"
    with_secret = url.replace("acpgate@", f"acpgate:{pg_cluster.password}@")
    async with _opened(PostgresTarget(with_secret)) as store:  # the URL's own password works too
        assert store.persistent and pg_cluster.password not in store.status.db_path


async def test_unreachable_server_falls_back_to_memory(pg_cluster: Cluster) -> None:
    """SPEC §2: nothing listens → after the connect timeout, memory with a reason."""
    url = f"postgresql://acpgate:hunter2@127.0.0.1:{_free_port()}/acp"
    started = time.monotonic()
    async with _opened(PostgresTarget(url, connect_timeout_secs=1.0)) as store:
        await _assert_memory(store, "postgresql://acpgate@127.0.0.1", secret="hunter2")
    assert 0.9 <= time.monotonic() - started < 10


async def test_waits_for_a_server_that_comes_up(pg_cluster: Cluster) -> None:
    """A session service started before its database (compose, a reboot) waits for it:
    the server's port opens a second later, and the store opens persistent."""
    port = _free_port()
    url = await fresh_url(pg_cluster, tcp=True, port=port)

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", pg_cluster.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    async def open_port_later() -> asyncio.Server:
        await asyncio.sleep(1.0)
        return await asyncio.start_server(forward, "127.0.0.1", port)

    later = asyncio.create_task(open_port_later())
    target = PostgresTarget(url, password=pg_cluster.password, connect_timeout_secs=20)
    try:
        async with _opened(target) as store:
            assert store.persistent, store.status.fallback_reason
            await store.create_session(NewSession("s", "a", "/w"))
    finally:
        server = await later
        server.close()


async def test_newer_or_foreign_database_is_refused_and_left_alone(pg_cluster: Cluster) -> None:
    """A database of a newer acpgate, or one whose ``sessions`` table is someone else's,
    is not touched, and not replaced by memory either: the start is refused, saying why."""
    newer = await fresh_url(pg_cluster)
    foreign = await fresh_url(pg_cluster)
    for url, ddl in ((newer, "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                             "INSERT INTO schema_version VALUES (99)"),
                     (foreign, "CREATE TABLE sessions (id INT)")):
        con = await asyncpg.connect(url)
        try:
            await con.execute(ddl)
        finally:
            await con.close()
    with pytest.raises(StoreUnusable, match="newer") as refused:
        await open_store(PostgresTarget(newer))
    assert refused.value.newer and refused.value.backend == "postgresql"
    with pytest.raises(StoreUnusable, match="not an acpgate store") as refused:
        await open_store(PostgresTarget(foreign))
    assert "[store] url" in str(refused.value)
    con = await asyncpg.connect(newer)
    try:
        assert await con.fetchval("SELECT version FROM schema_version") == 99
    finally:
        await con.close()


async def test_lost_connection_is_unavailable_then_recovers(pg_url: str) -> None:
    """The server drops the store's connections (a restart, a failover). An idle one is
    replaced unnoticed; a call in flight — a turn waiting for its row lock — is
    StoreUnavailable, not a crash, and nothing of it is stored; the next call reconnects."""
    async with _opened(PostgresTarget(pg_url, pool_size=2)) as store:
        await store.create_session(NewSession("s", "a", "/w"))
        admin = await asyncpg.connect(pg_url)
        try:
            await _terminate_store_connections(admin)
            assert (await store.get_session("s")).workspace_dir == "/w"  # idle: replaced
            async with admin.transaction():
                await admin.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
                turn = asyncio.create_task(
                    store.append_turn("s", [HistoryEntry(role="user", text="lost")]))
                # Until the turn waits on the lock (no fixed count: a loaded machine can
                # take seconds to get there, and terminating earlier tests nothing).
                deadline = asyncio.get_running_loop().time() + 60
                while not await admin.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND application_name = 'acpgate-session'"):
                    assert asyncio.get_running_loop().time() < deadline, "the turn never waited"
                    assert not turn.done(), turn
                    await asyncio.sleep(0.02)
                await _terminate_store_connections(admin)
                with pytest.raises(StoreUnavailable, match="unavailable"):
                    await turn
        finally:
            await admin.close()
        rec = await store.get_session("s")
        assert rec.message_count == 0 and rec.title == ""
        await store.append_turn("s", [HistoryEntry(role="user", text="after")])
        assert (await store.get_session("s")).message_count == 1


async def _terminate_store_connections(admin: asyncpg.Connection) -> None:
    killed = await admin.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name = 'acpgate-session'")
    assert killed >= 1


#: What a pooled connection could carry over to its next user (one count per kind; a
#: setting counts when it differs from its value at connection: asyncpg's type
#: introspection sets ``jit`` back with ``set_config``).
_LEFT_STATE = (
    "SELECT (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"
    " AND locktype = 'advisory'),"
    " (SELECT count(*) FROM pg_settings WHERE source = 'session'"
    " AND setting IS DISTINCT FROM reset_val),"
    " (SELECT count(*) FROM pg_listening_channels()),"
    " (SELECT count(*) FROM pg_cursors WHERE name <> ''),"  # '': this query's own
    " (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND state LIKE 'idle in transaction%')")


async def _pooled_state(store: SessionStore, size: int) -> list[tuple[int, ...]]:
    """The state every pooled connection holds (``size`` of them taken at once)."""
    assert isinstance(store, PostgresSessionStore)
    pool = store._pool
    cons = [await pool.acquire() for _ in range(size)]
    try:
        rows = [await con.fetchrow(_LEFT_STATE) for con in cons]
        return [tuple(row) for row in rows if row is not None]
    finally:
        for con in cons:
            await pool.release(con)


async def test_a_pooled_connection_is_released_without_session_state(pg_url: str) -> None:
    """The pool skips asyncpg's reset query on release (a round trip per operation), so no
    store operation may leave state on a pooled connection: no advisory lock (the host
    locks live on a connection of their own), no setting, no LISTEN, no cursor; a
    transaction left open is rolled back by asyncpg itself."""
    async with _opened(PostgresTarget(pg_url, pool_size=3)) as store:
        await store.create_session(NewSession("s", "a", "/w", gateway_instance_id="host-a/1",
                                              claim_ttl_ms=30_000))
        await store.create_session(NewSession("t", "a", "/w"))
        await asyncio.gather(
            store.claim("t", "host-b/1", ttl_ms=30_000),
            store.append_events([SessionBatch("s", [LoggedEvent(1, 1, "update", b"{}", 1)],
                                              [TurnMark(1, "running", 1)], holder="host-a/1",
                                              generation=1)]),
            store.append_turn("s", [HistoryEntry(role="user", text="hi")],
                              holder="host-a/1", generation=1),
            store.list_sessions(),
        )
        await store.fork_session("s", "f", agent_alias="a", gateway_instance_id="host-c/1",
                                 claim_ttl_ms=30_000)
        await store.renew_claims("host-a/1", ["s"], ttl_ms=30_000)
        await store.interrupt_turns(instance_id="host-z/1")
        assert [h async for h in store.iter_history_pages("s")]
        assert await store.delete_session("t")
        with pytest.raises(asyncpg.PostgresError):  # a failed transaction
            await store._transaction(lambda con: con.execute("SELECT 1/0"))  # type: ignore[attr-defined]
        assert await _pooled_state(store, 3) == [(0, 0, 0, 0, 0)] * 3
        # A transaction a careless operation leaves open is rolled back on release...
        await store._call(lambda con: con.execute("BEGIN"))  # type: ignore[attr-defined]
        assert await _pooled_state(store, 3) == [(0, 0, 0, 0, 0)] * 3
        # ...and the check sees the state it would leave otherwise.
        await store._call(lambda con: con.execute(  # type: ignore[attr-defined]
            "SET work_mem = '8MB'; SELECT pg_advisory_lock(1)"))
        assert (1, 1, 0, 0, 0) in await _pooled_state(store, 3)
