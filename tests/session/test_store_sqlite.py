"""What only the SQLite store has: the WAL file, the migrations from older files, and the
memory fallback when the file cannot be created (SPEC §2, §8) — and the refusal of one
that exists and cannot be used. The store contract itself
runs on every backend in ``test_store.py``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiosqlite
import pytest

from services.session.store import (
    LATEST_SCHEMA_VERSION,
    HistoryEntry,
    InvalidItem,
    NewSession,
    SessionActiveElsewhere,
    SessionStore,
    StoreUnusable,
    TurnUsage,
    open_store,
)
from services.session.store.sqlite.db import connect
from services.session.store.sqlite.schema import _MIGRATIONS, _V2_TABLES, _V4_CLAIM
from tests.session.old_rows import CHILD, OLD_ROWS, RAN, SPAWNED


async def _history(store: SessionStore, sid: str) -> list[HistoryEntry]:
    return [e async for e in store.iter_history(sid)]


async def test_connections_racing_to_switch_a_fresh_file_to_wal_all_get_it(tmp_path: Path) -> None:
    """Several services or hosts opening one fresh file at once all switch it to WAL:
    SQLite answers the losers of that race "database is locked" at once, without its
    busy wait, so the switch is retried (it lost about one race in 200 without)."""
    for attempt in range(60):
        target = str(tmp_path / f"race{attempt}.db")
        connections = await asyncio.gather(*(connect(target) for _ in range(5)))
        for db in connections:
            async with db.execute("PRAGMA journal_mode") as cur:
                assert (await cur.fetchone()) == ("wal",)
            await db.close()


async def test_spec8_open_creates_wal_db_with_schema_version(tmp_path: Path) -> None:
    """SPEC §8: one SQLite database in WAL mode, with a schema version table."""
    db = tmp_path / "data" / "sessions" / "acp-sessions.db"
    s = await open_store(db)
    assert s.status.persistent and s.status.db_path == str(db)
    assert s.status.fallback_reason == ""
    assert s.status.schema_version == LATEST_SCHEMA_VERSION
    await s.create_session(NewSession("s1", "a", "/w"))
    await s.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT version FROM schema_version").fetchone()[0] == LATEST_SCHEMA_VERSION
    finally:
        con.close()
    # Reopening keeps the data and the version.
    s2 = await open_store(db)
    assert (await s2.get_session("s1")).agent_alias == "a"
    await s2.close()


# ------------------------------------------------------------------ migration


def _write_v1(path: Path) -> None:
    """The original minimal zeroclaw layout, as an older release left it."""
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, workspace_dir TEXT NOT NULL,
                               created_at TEXT NOT NULL, last_activity TEXT NOT NULL);
        CREATE TABLE messages (session_id TEXT NOT NULL REFERENCES sessions(id),
                               role TEXT NOT NULL, content TEXT NOT NULL,
                               created_at TEXT NOT NULL);
        INSERT INTO sessions VALUES ('old-1', '/proj', '2024-01-02T03:04:05Z',
                                     '2024-01-02T04:00:00+00:00');
        INSERT INTO sessions VALUES ('old-2', '/other', '1700000000', '1700000100');
        INSERT INTO messages VALUES ('old-1', 'system', 'you are helpful', '2024-01-02T03:04:05Z');
        INSERT INTO messages VALUES ('old-1', 'user', 'What is the last commit?',
                                     '2024-01-02T03:04:06Z');
        INSERT INTO messages VALUES ('old-1', 'assistant', 'The last commit...',
                                     '2024-01-02T03:04:07Z');
        INSERT INTO messages VALUES ('old-1', 'tool', 'git log output', '2024-01-02T03:04:08Z');
        INSERT INTO messages VALUES ('old-1', 'user', 'thanks', '2024-01-02T03:05:00Z');
        INSERT INTO messages VALUES ('old-1', 'assistant', 'welcome', '2024-01-02T03:05:01Z');
        """
    )
    con.commit()
    con.close()


async def test_spec8_migrates_v1_zeroclaw_file(tmp_path: Path) -> None:
    """A database written by the original zeroclaw layout (v1) opens and migrates forward."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v1(db)
    s = await open_store(db)
    try:
        assert s.status.persistent and s.status.schema_version == LATEST_SCHEMA_VERSION
        rec = await s.get_session("old-1")
        assert rec.workspace_dir == "/proj"
        assert rec.created_at == 1704164645000
        assert rec.last_activity == 1704168000000
        assert rec.title == "What is the last commit?"
        assert rec.agent_alias == "" and rec.state == "inactive"
        items = await _history(s, "old-1")
        assert [(i.role, i.turn) for i in items] == [
            ("user", 1), ("assistant", 1), ("tool_result", 1), ("user", 2), ("assistant", 2),
        ]
        assert items[2].output == "git log output"
        assert (await s.get_session("old-2")).created_at == 1_700_000_000_000
        # New turns continue after the migrated ones.
        r = await s.append_turn("old-1", [HistoryEntry(role="user", text="more")])
        assert (r.turn, r.first_seq) == (3, 6)
        # The first alias bound to a legacy row gives it its ownership.
        bound = await s.update_session("old-1", agent_alias="alpha")
        assert bound.ownership.session_key == "agent:alpha:acp:old-1"
        assert bound.ownership.owner_session_key == bound.ownership.session_key
        assert bound.ownership.agent_id == "alpha"
    finally:
        await s.close()
    # Nothing is lost: every v1 message (even the system one) is kept verbatim.
    con = sqlite3.connect(db)
    try:
        kept = con.execute("SELECT role, content FROM legacy_messages_v1").fetchall()
        assert ("system", "you are helpful") in kept and len(kept) == 6
    finally:
        con.close()
    # A second open does not migrate again.
    s2 = await open_store(db)
    assert len(await _history(s2, "old-1")) == 6
    await s2.close()


# ------------------------------------------------------------------ memory fallback


@contextlib.contextmanager
def _readonly_dir(path: Path) -> Iterator[Path]:
    """A directory writes fail in: a read-only tmpfs when root can mount, else chmod 0555."""
    path.mkdir(parents=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip("running as root without a way to make a read-only directory")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


async def _assert_memory_store(s: SessionStore, reason_part: str) -> None:
    assert not s.persistent
    assert s.status.db_path == ""
    assert reason_part in s.status.fallback_reason
    # Memory mode still works end to end.
    await s.create_session(NewSession("m1", "a", "/w"))
    await s.append_turn("m1", [HistoryEntry(role="user", text="hi")])
    assert len(await _history(s, "m1")) == 1
    await s.close()


async def test_spec2_fallback_readonly_dir(tmp_path: Path) -> None:
    """SPEC §2: a read-only data dir → memory store, reason reported."""
    with _readonly_dir(tmp_path / "ro") as ro:
        s = await open_store(ro / "sessions" / "acp-sessions.db")
        await _assert_memory_store(s, str(ro / "sessions"))


async def test_spec2_fallback_sessions_is_a_file(tmp_path: Path) -> None:
    """SPEC §2: a file where the sessions/ dir should be → memory store; the file is untouched."""
    (tmp_path / "sessions").write_text("not a dir")
    s = await open_store(tmp_path / "sessions" / "acp-sessions.db")
    await _assert_memory_store(s, "not a directory")
    assert (tmp_path / "sessions").read_text() == "not a dir"


@pytest.mark.parametrize(
    "content",
    [b"this is definitely not sqlite" * 100, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["garbage", "bad-pages"],
)
async def test_a_corrupt_file_is_refused_and_never_overwritten(tmp_path: Path,
                                                               content: bytes) -> None:
    """A file that exists and cannot be used is refused (no memory store that would
    answer "not found" for every session in it); the file is never overwritten."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    db.write_bytes(content)
    with pytest.raises(StoreUnusable) as refused:
        await open_store(db)
    assert refused.value.where == str(db) and not refused.value.newer
    assert "acpgate store repair" in str(refused.value)
    assert db.read_bytes() == content
    assert not (tmp_path / "sessions" / "acp-sessions.db-wal").exists()


async def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    db = tmp_path / "acp-sessions.db"
    store = await open_store(db)
    await store.close()
    db.chmod(0)
    try:
        with pytest.raises(StoreUnusable, match="Permission denied"):
            await open_store(db)
    finally:
        db.chmod(0o600)


async def test_an_empty_file_is_a_new_store(tmp_path: Path) -> None:
    db = tmp_path / "acp-sessions.db"
    db.touch()
    store = await open_store(db)
    assert store.persistent
    await store.close()


async def test_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A database from a newer acpgate is refused, not downgraded."""
    db = tmp_path / "acp-sessions.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      "INSERT INTO schema_version VALUES (99);")
    con.commit()
    con.close()
    with pytest.raises(StoreUnusable, match="newer") as refused:
        await open_store(db)
    assert refused.value.newer and "store repair" not in str(refused.value)
    con = sqlite3.connect(db)
    assert con.execute("SELECT version FROM schema_version").fetchone()[0] == 99
    con.close()




def _write_v2(path: Path) -> None:
    """A v2 database with one session row and one turn, as schema v2 wrote
    it."""
    con = sqlite3.connect(path)
    con.executescript("\n".join(f"{stmt};" for stmt in _V2_TABLES) + """
        INSERT INTO schema_version VALUES (2);
        INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity, state,
                              session_key, owner_session_key, agent_id, last_seq, last_turn,
                              title)
            VALUES ('v2', 'alpha', '/w', 5, 6, 'active', 'agent:alpha:acp:v2',
                    'agent:alpha:acp:v2', 'alpha', 1, 1, 'hi');
        INSERT INTO history (session_id, seq, turn, role, text, created_at)
            VALUES ('v2', 1, 1, 'user', 'hi', 5);
    """)
    con.commit()
    con.close()


async def test_v2_file_migrates_to_the_latest_version(tmp_path: Path) -> None:
    """v2 → … → v8: rows and history stay; every row has no MCP server list stored
    (v3), starts unclaimed (v4), has no adapter capabilities recorded
    (v5) and no extra roots, mode, config or token totals, its old turns no usage
    (v6); its stored bytes are counted from its history (v7); it is no
    fork (v8); its claim records no public URL (v9); it is no subagent (v11)."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v2(db)
    s = await open_store(db)
    try:
        assert s.persistent and s.status.schema_version == LATEST_SCHEMA_VERSION == 12
        rec = await s.get_session("v2")
        assert rec.forked_from == "" and not rec.subagent
        assert rec.claim.public_url == ""
        assert (rec.state, rec.title, rec.message_count) == ("active", "hi", 1)
        assert (rec.stored_bytes, rec.claim.generation) == (len("user") + len("hi"), 0)
        assert rec.mcp_servers_json == ""
        assert rec.claim.instance_id == "" and rec.claim.until == 0
        assert (rec.additional_directories, rec.mode_id, rec.config_json) == ((), "", "")
        assert (rec.input_tokens, rec.output_tokens) == (0, 0)
        assert [e.text for e in await _history(s, "v2")] == ["hi"]
        assert (await s.claim("v2", "gw", ttl_ms=1000)).claim.instance_id == "gw"
        assert await s.get_agent_capabilities("alpha") == ""
        await s.append_turn("v2", [HistoryEntry(role="user", text="more")],
                            usage=TurnUsage(input_tokens=2, output_tokens=3))
        rec = await s.get_session("v2")
        assert (rec.input_tokens, rec.output_tokens, rec.message_count) == (2, 3, 2)
    finally:
        await s.close()


async def test_v4_file_keeps_its_claims_and_gains_adapter_capabilities(tmp_path: Path) -> None:
    """v4 → v5: a file with claim columns (schema v4) keeps
    its rows and live claims and gets the agent_capabilities table."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v2(db)
    con = sqlite3.connect(db)
    con.executescript(
        "ALTER TABLE sessions ADD COLUMN mcp_servers_json TEXT NOT NULL DEFAULT '';"
        + "".join(f"{stmt};" for stmt in _V4_CLAIM)
        + "UPDATE sessions SET active_instance_id = 'gw-a', active_host = 'a',"
          " active_until = 9000000000000;"
          "UPDATE schema_version SET version = 4;"
    )
    con.commit()
    con.close()
    s = await open_store(db)
    try:
        assert s.persistent and s.status.schema_version == LATEST_SCHEMA_VERSION
        rec = await s.get_session("v2")
        assert (rec.claim.instance_id, rec.claim.host) == ("gw-a", "a")
        assert rec.claim.generation == 1  # v7: a live claim is its first generation
        with pytest.raises(SessionActiveElsewhere):  # still live: the claim was kept
            await s.claim("v2", "gw-b", ttl_ms=1000)
        assert [e.text for e in await _history(s, "v2")] == ["hi"]
        await s.set_agent_capabilities("alpha", '{"loadSession": true}')
        assert await s.get_agent_capabilities("alpha") == '{"loadSession": true}'
    finally:
        await s.close()


async def test_v8_file_keeps_its_live_claim_and_gains_the_claim_url(tmp_path: Path) -> None:
    """v8 → v9: a file as v8 shipped it (every step up to v8 run on a v2 file)
    keeps its live claim, generation and history; the claim records no public URL (its
    holder's address is not known until it claims again), and the next claim records one."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v2(db)
    async with aiosqlite.connect(db) as con:
        for version in range(2, 8):
            await _MIGRATIONS[version](con, 0)
        await con.execute("UPDATE schema_version SET version = 8")
        await con.execute("UPDATE sessions SET active_instance_id = 'gw-a', active_host = 'a',"
                          " active_until = 9000000000000, claim_generation = 3")
        await con.commit()
    s = await open_store(db)
    try:
        assert s.persistent and s.status.schema_version == LATEST_SCHEMA_VERSION == 12
        rec = await s.get_session("v2")
        assert (rec.claim.instance_id, rec.claim.host, rec.claim.generation) == ("gw-a", "a", 3)
        assert rec.claim.public_url == ""
        with pytest.raises(SessionActiveElsewhere):  # still live: the claim was kept
            await s.claim("v2", "gw-b", ttl_ms=1000)
        assert [e.text for e in await _history(s, "v2")] == ["hi"]
        again = await s.claim("v2", "gw-a", ttl_ms=1000, public_url="wss://a.example/acp")
        assert (again.claim.generation, again.claim.public_url) == (4, "wss://a.example/acp")
    finally:
        await s.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(12,)]
    finally:
        con.close()


async def test_v10_file_gains_the_subagent_mark(tmp_path: Path) -> None:
    """v10 → v11: a file as v10 shipped it (every step up to v10 run on a v2 file) keeps
    its rows, history and event log; no row is marked a subagent, and a new child row is."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v2(db)
    async with aiosqlite.connect(db) as con:
        for version in range(2, 10):
            await _MIGRATIONS[version](con, 0)
        await con.execute("UPDATE schema_version SET version = 10")
        await con.commit()
    s = await open_store(db)
    try:
        assert s.persistent and s.status.schema_version == LATEST_SCHEMA_VERSION == 12
        rec = await s.get_session("v2")
        assert not rec.subagent and (rec.title, rec.message_count) == ("hi", 1)
        assert [e.text for e in await _history(s, "v2")] == ["hi"]
        key = rec.ownership.session_key
        child = await s.create_session(NewSession(
            "c1", "alpha", "/w", spawned_by=key, parent_session_key=key,
            owner_session_key=key, state="inactive", subagent=True))
        assert child.subagent and (await s.get_session("c1")).subagent
        assert not (await s.get_session("v2")).subagent
    finally:
        await s.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(12,)]
    finally:
        con.close()



async def test_v11_file_marks_its_old_children_and_records_no_protocol(tmp_path: Path) -> None:
    """v11 → v12: a v2 agent's child row stored before the subagent mark is recognised by
    the id acpgate gives a child and marked; a spawned session, a version-5 id that ran
    turns and a top session are not. No row has a protocol version recorded; one written
    after is stored and read back, and a number that is no ACP version is refused."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v2(db)
    async with aiosqlite.connect(db) as con:
        for version in range(2, 11):
            await _MIGRATIONS[version](con, 0)
        await con.execute(OLD_ROWS)
        await con.execute("UPDATE schema_version SET version = 11")
        await con.commit()
    s = await open_store(db)
    try:
        assert s.status.schema_version == LATEST_SCHEMA_VERSION == 12
        marked = {sid: (await s.get_session(sid)).subagent
                  for sid in ("v2", "top", CHILD, SPAWNED, RAN)}
        assert marked == {"v2": False, "top": False, CHILD: True, SPAWNED: False,
                          RAN: False}
        assert {(await s.get_session(sid)).protocol_version for sid in marked} == {0}
        rec = await s.update_session("top", protocol_version=2)
        assert rec.protocol_version == 2 == (await s.get_session("top")).protocol_version
        with pytest.raises(InvalidItem):
            await s.update_session("top", protocol_version=70000)
    finally:
        await s.close()
