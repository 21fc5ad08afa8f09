"""SPEC §8 (store), §2 (memory fallback), §13 (ownership rows) against real SQLite files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from services.common.protocol import HISTORY_ROLES
from services.session.store import (
    LATEST_SCHEMA_VERSION,
    HistoryEntry,
    InvalidItem,
    SessionExists,
    SessionNotFound,
    SessionStore,
    make_title,
    open_store,
)
from services.session.store.records import ITEM_FIELDS
from services.session.store.sqlite_schema import _V2_TABLES


class FakeClock:
    """A millisecond clock the test moves by hand."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _turn(text: str = "hello") -> list[HistoryEntry]:
    return [
        HistoryEntry(role="user", text=text),
        HistoryEntry(role="thought", text="thinking"),
        HistoryEntry(
            role="tool_call", tool_call_id="tc-1", tool_name="file_read", tool_kind="read",
            title="file_read", arguments_json='{"path": "a.txt"}',
        ),
        HistoryEntry(role="tool_result", tool_call_id="tc-1", output="contents", status="completed",
                     content_json='[{"type": "content"}]'),
        HistoryEntry(role="assistant", text="done"),
    ]


async def _history(store: SessionStore, sid: str, **kw: int) -> list[HistoryEntry]:
    return [e async for e in store.iter_history(sid, **kw)]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    s = await open_store(tmp_path / "sessions" / "acp-sessions.db", clock=FakeClock())
    yield s
    await s.close()


async def test_spec8_open_creates_wal_db_with_schema_version(tmp_path: Path) -> None:
    """SPEC §8: one SQLite database in WAL mode, with a schema version table."""
    db = tmp_path / "data" / "sessions" / "acp-sessions.db"
    s = await open_store(db)
    assert s.status.persistent and s.status.db_path == str(db)
    assert s.status.fallback_reason == ""
    assert s.status.schema_version == LATEST_SCHEMA_VERSION
    await s.create_session("s1", "a", "/w")
    await s.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT version FROM schema_version").fetchone()[0] == 3
    finally:
        con.close()
    # Reopening keeps the data and the version.
    s2 = await open_store(db)
    assert (await s2.get_session("s1")).agent_alias == "a"
    await s2.close()


async def test_spec13_create_session_ownership(store: SessionStore) -> None:
    """SPEC §13: key agent:<alias>:acp:<id>, backend acpx, agent_id = alias, owner defaults."""
    rec = await store.create_session("s1", "alpha", "/w", gateway_instance_id="gw-1")
    o = rec.ownership
    assert o.session_key == "agent:alpha:acp:s1"
    assert o.owner_session_key == o.session_key
    assert o.backend == "acpx" and o.agent_id == "alpha" and o.gateway_instance_id == "gw-1"
    assert o.created_at == rec.created_at == rec.last_activity
    assert rec.state == "active" and rec.token_count == 0 and rec.message_count == 0
    child = await store.create_session("s2", "beta", "/w", spawned_by="agent:alpha:acp:s1",
                                       parent_session_key="agent:alpha:acp:s1")
    assert child.ownership.owner_session_key == "agent:alpha:acp:s1"
    assert child.ownership.spawned_by == "agent:alpha:acp:s1"
    explicit = await store.create_session("s3", "beta", "/w", spawned_by="x", owner_session_key="o")
    assert explicit.ownership.owner_session_key == "o"
    with pytest.raises(SessionExists):
        await store.create_session("s1", "alpha", "/w")
    with pytest.raises(InvalidItem):
        await store.create_session("", "alpha", "/w")
    assert (await store.find_by_session_key("agent:beta:acp:s2")) == await store.get_session("s2")
    assert await store.find_by_session_key("agent:none:acp:x") is None


async def test_spec8_append_turn_round_trip(store: SessionStore) -> None:
    """SPEC §8: a whole turn is stored and read back in order, tool payloads once each."""
    await store.create_session("s1", "a", "/w")
    r1 = await store.append_turn("s1", _turn("first question"), token_delta=12,
                                 plan_json='[{"content": "x"}]')
    assert (r1.turn, r1.first_seq, r1.last_seq) == (1, 1, 5)
    r2 = await store.append_turn("s1", [HistoryEntry(role="user", text="second"),
                                        HistoryEntry(role="assistant", text="ok")], token_delta=3)
    assert (r2.turn, r2.first_seq, r2.last_seq) == (2, 6, 7)
    items = await _history(store, "s1")
    assert [i.seq for i in items] == list(range(1, 8))
    assert [i.turn for i in items] == [1, 1, 1, 1, 1, 2, 2]
    assert [i.role for i in items] == [
        "user", "thought", "tool_call", "tool_result", "assistant", "user", "assistant",
    ]
    call, result = items[2], items[3]
    assert call.arguments_json == '{"path": "a.txt"}' and call.output == ""
    assert result.output == "contents" and result.arguments_json == ""
    assert result.status == "completed" and result.content_json == '[{"type": "content"}]'
    rec = await store.get_session("s1")
    assert rec.token_count == 15 and rec.message_count == 7
    assert rec.plan_json == '[{"content": "x"}]'  # unchanged by a turn without a plan
    assert rec.title == "first question"
    assert [i.seq for i in await _history(store, "s1", after_seq=5)] == [6, 7]
    # Paged read-back returns the same sequence.
    paged = [e async for e in store.iter_history("s1", page=2)]
    assert paged == items


async def test_spec8_turn_is_all_or_nothing(store: SessionStore) -> None:
    """SPEC §8: a bad item after good ones rolls the whole turn back; so does an unknown id."""
    await store.create_session("s1", "a", "/w")
    await store.append_turn("s1", _turn())
    before = await store.get_session("s1")
    bad_items = [
        HistoryEntry(role="banana", text="x"),
        HistoryEntry(role="tool_call", tool_name="shell"),  # no tool_call_id
        HistoryEntry(role="tool_call", tool_call_id="t", tool_name="x", arguments_json="{nope"),
        HistoryEntry(role="tool_call", tool_call_id="t", tool_name="x", arguments_json="[1]"),
        HistoryEntry(role="tool_result", tool_call_id="t", status="weird"),
        HistoryEntry(role="", text="x"),
    ]
    for bad in bad_items:
        with pytest.raises(InvalidItem):
            await store.append_turn("s1", [*_turn("again"), bad], token_delta=5, plan_json="[]")
    with pytest.raises(InvalidItem):
        await store.append_turn("s1", [])
    with pytest.raises(SessionNotFound):
        await store.append_turn("missing", _turn())
    after = await store.get_session("s1")
    assert after == before
    assert len(await _history(store, "s1")) == 5
    # The store is still usable and numbering continues without gaps.
    r = await store.append_turn("s1", [HistoryEntry(role="user", text="ok")])
    assert (r.turn, r.first_seq) == (2, 6)


async def test_every_history_role_is_storable(store: SessionStore) -> None:
    """The schema's frozen role CHECK admits every role of HISTORY_ROLES (a new role
    needs a migration), and the roles read back as written."""
    await store.create_session("s1", "a", "/w")
    items = [HistoryEntry(role=role, text="x", tool_call_id="t", tool_name="shell")
             for role in HISTORY_ROLES]
    await store.append_turn("s1", items)
    assert tuple(e.role for e in await _history(store, "s1")) == HISTORY_ROLES


def test_item_fields_are_the_history_entry_fields_after_role() -> None:
    """``HistoryEntry(role, *item_values(x))`` is only right while this holds."""
    names = [f.name for f in fields(HistoryEntry)]
    assert names[0] == "role"
    assert tuple(names[1 : 1 + len(ITEM_FIELDS)]) == ITEM_FIELDS
    assert set(names) - set(ITEM_FIELDS) == {"role", "seq", "turn", "created_at"}


async def test_spec8_title_is_first_user_message_one_line(store: SessionStore) -> None:
    """session/list title: first user message of the first turn, one line, ≤ 80 chars."""
    await store.create_session("s1", "a", "/w")
    long = "line one\n\n  line   two " + "x" * 200
    await store.append_turn("s1", [HistoryEntry(role="user", text=long)])
    await store.append_turn("s1", [HistoryEntry(role="user", text="later")])
    title = (await store.get_session("s1")).title
    assert "\n" not in title and len(title) <= 80 and title.startswith("line one line two x")
    assert make_title("short") == "short"


async def test_spec8_last_activity_moves_forward(store: SessionStore, tmp_path: Path) -> None:
    """last_activity: set at creation, bumped by touch and by each turn, never backwards."""
    clock = FakeClock(1000)
    s = await open_store(tmp_path / "other.db", clock=clock)
    try:
        rec = await s.create_session("s1", "a", "/w")
        assert rec.last_activity == 1000
        clock.now = 2000
        assert (await s.touch("s1")).last_activity == 2000
        clock.now = 3000
        await s.append_turn("s1", [HistoryEntry(role="user", text="x")])
        assert (await s.get_session("s1")).last_activity == 3000
        clock.now = 2500  # a clock step backwards never moves it back
        assert (await s.touch("s1")).last_activity == 3000
        assert (await s.get_session("s1")).created_at == 1000
        with pytest.raises(SessionNotFound):
            await s.touch("nope")
    finally:
        await s.close()


async def test_update_session_fields(store: SessionStore) -> None:
    """UpdateSession changes only the given fields."""
    await store.create_session("s1", "a", "/w")
    rec = await store.update_session("s1", state="inactive", lease_id="L1",
                                     adapter_session_id="ad-1", plan_json='{"entries": []}')
    assert (rec.state, rec.lease_id, rec.adapter_session_id) == ("inactive", "L1", "ad-1")
    rec = await store.update_session("s1", lease_id="")
    assert rec.lease_id == "" and rec.adapter_session_id == "ad-1" and rec.state == "inactive"
    with pytest.raises(InvalidItem):
        await store.update_session("s1", state="zombie")
    with pytest.raises(InvalidItem):
        await store.update_session("s1", plan_json="{bad")
    with pytest.raises(SessionNotFound):
        await store.update_session("nope", state="active")


async def test_list_sessions_order_and_cwd(store: SessionStore) -> None:
    """Rows come newest activity first, after a position, optionally for one cwd."""
    clock = FakeClock(10)
    s = await open_store(None, clock=clock)
    for i, ws in enumerate(["/a", "/b", "/a"]):
        clock.now = 10 + i
        await s.create_session(f"s{i}", "x", ws)
    assert [r.session_id for r in await s.list_sessions()] == ["s2", "s1", "s0"]
    assert [r.session_id for r in await s.list_sessions(cwd="/a")] == ["s2", "s0"]
    assert [r.session_id for r in await s.list_sessions(after=(11, "s1"))] == ["s0"]
    assert [r.session_id for r in await s.list_sessions(limit=1)] == ["s2"]
    await s.close()


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


def _write_v2(path: Path) -> None:
    """A v2 database with one session row, as the release before issue 16 left it."""
    con = sqlite3.connect(path)
    con.executescript("\n".join(f"{stmt};" for stmt in _V2_TABLES) + """
        INSERT INTO schema_version VALUES (2);
        INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity)
            VALUES ('v2-1', 'a', '/w', 1, 2);
    """)
    con.commit()
    con.close()


async def test_migrates_v2_to_v3_with_an_mcp_server_list_per_session(tmp_path: Path) -> None:
    """v3 (issue 16): a row keeps the client's MCP server list; v2 rows have none stored."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    _write_v2(db)
    s = await open_store(db)
    try:
        assert s.status.schema_version == LATEST_SCHEMA_VERSION == 3
        assert (await s.get_session("v2-1")).mcp_servers_json == ""
        listed = '[{"name": "fs", "command": "/bin/fs", "args": [], "env": []}]'
        rec = await s.create_session("n1", "a", "/w", mcp_servers_json=listed)
        assert rec.mcp_servers_json == listed
        assert (await s.update_session("v2-1", mcp_servers_json="[]")).mcp_servers_json == "[]"
        assert (await s.update_session("n1", title="x")).mcp_servers_json == listed  # unchanged
        with pytest.raises(InvalidItem, match="must be a JSON array"):
            await s.update_session("n1", mcp_servers_json='{"name": "fs"}')
        with pytest.raises(InvalidItem, match="not valid JSON"):
            await s.create_session("n2", "a", "/w", mcp_servers_json="[")
    finally:
        await s.close()


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
    await s.create_session("m1", "a", "/w")
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
async def test_spec2_fallback_corrupt_file_never_overwritten(tmp_path: Path, content: bytes) -> None:
    """SPEC §2: a corrupt database → memory store; the corrupt file is never overwritten."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    db.parent.mkdir()
    db.write_bytes(content)
    s = await open_store(db)
    await _assert_memory_store(s, str(db))
    assert db.read_bytes() == content
    assert not (tmp_path / "sessions" / "acp-sessions.db-wal").exists()


async def test_spec2_fallback_newer_schema(tmp_path: Path) -> None:
    """A database from a newer acpgate is left alone (memory), not downgraded."""
    db = tmp_path / "acp-sessions.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      "INSERT INTO schema_version VALUES (99);")
    con.commit()
    con.close()
    s = await open_store(db)
    await _assert_memory_store(s, "newer")
    con = sqlite3.connect(db)
    assert con.execute("SELECT version FROM schema_version").fetchone()[0] == 99
    con.close()


# ------------------------------------------------------------------ concurrency


async def test_spec8_concurrent_appends_from_several_connections(tmp_path: Path) -> None:
    """Several connections (as several processes would) append turns at once: no turn is lost,
    none interleaves, seq numbers stay dense."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    stores = [await open_store(db) for _ in range(4)]
    try:
        await stores[0].create_session("s1", "a", "/w")
        turns_each = 10

        async def writer(idx: int, s: SessionStore) -> None:
            for n in range(turns_each):
                await s.append_turn(
                    "s1",
                    [HistoryEntry(role="user", text=f"w{idx}-{n}"),
                     HistoryEntry(role="assistant", text=f"w{idx}-{n}-reply")],
                    token_delta=1,
                )

        await asyncio.gather(*(writer(i, s) for i, s in enumerate(stores)))
        # Two coroutines on one connection too.
        await asyncio.gather(writer(10, stores[0]), writer(11, stores[0]))
        items = await _history(stores[1], "s1")
        total_turns = turns_each * 6
        assert len(items) == 2 * total_turns
        assert [i.seq for i in items] == list(range(1, 2 * total_turns + 1))
        for k in range(0, len(items), 2):  # each turn's two items are adjacent and paired
            user, reply = items[k], items[k + 1]
            assert user.turn == reply.turn and reply.text == user.text + "-reply"
        assert sorted({i.turn for i in items}) == list(range(1, total_turns + 1))
        assert (await stores[2].get_session("s1")).token_count == total_turns
    finally:
        for s in stores:
            await s.close()


async def test_concurrent_first_open_migrates_once(tmp_path: Path) -> None:
    """Several connections opening a fresh file at once all end up persistent on one schema."""
    db = tmp_path / "sessions" / "acp-sessions.db"
    stores = await asyncio.gather(*(open_store(db) for _ in range(5)))
    try:
        assert all(s.persistent and s.status.schema_version == LATEST_SCHEMA_VERSION
                   for s in stores)
        await stores[0].create_session("s1", "a", "/w")
        assert (await stores[4].get_session("s1")).workspace_dir == "/w"
    finally:
        for s in stores:
            await s.close()
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
    finally:
        con.close()
