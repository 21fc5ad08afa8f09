"""The store contract on every backend (SPEC §8 store, §13 ownership rows).

Each test here runs against SQLite (a real file) and PostgreSQL (a real
database in the session's throwaway cluster) through the ``backend`` and
``store`` fixtures of ``conftest.py``: one suite, one behaviour. What only one
backend has — SQLite's WAL file and v1 migration, PostgreSQL's URL and login —
is in ``test_store_sqlite.py`` and ``test_store_postgres.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields

import pytest

from services.common.protocol import HISTORY_ROLES
from services.session.store import (
    LATEST_SCHEMA_VERSION,
    HistoryEntry,
    InvalidItem,
    NewSession,
    SessionExists,
    SessionNotFound,
    SessionStore,
    make_title,
)
from services.session.store.records import ITEM_FIELDS
from tests.session.conftest import Backend, FakeClock


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


async def test_spec13_create_session_ownership(store: SessionStore) -> None:
    """SPEC §13: key agent:<alias>:acp:<id>, backend acpx, agent_id = alias, owner defaults."""
    rec = await store.create_session(NewSession("s1", "alpha", "/w", gateway_instance_id="gw-1"))
    o = rec.ownership
    assert o.session_key == "agent:alpha:acp:s1"
    assert o.owner_session_key == o.session_key
    assert o.backend == "acpx" and o.agent_id == "alpha" and o.gateway_instance_id == "gw-1"
    assert o.created_at == rec.created_at == rec.last_activity
    assert rec.state == "active" and rec.token_count == 0 and rec.message_count == 0
    child = await store.create_session(NewSession("s2", "beta", "/w", spawned_by="agent:alpha:acp:s1",
                                       parent_session_key="agent:alpha:acp:s1"))
    assert child.ownership.owner_session_key == "agent:alpha:acp:s1"
    assert child.ownership.spawned_by == "agent:alpha:acp:s1"
    explicit = await store.create_session(NewSession("s3", "beta", "/w", spawned_by="x", owner_session_key="o"))
    assert explicit.ownership.owner_session_key == "o"
    with pytest.raises(SessionExists):
        await store.create_session(NewSession("s1", "alpha", "/w"))
    with pytest.raises(InvalidItem):
        await store.create_session(NewSession("", "alpha", "/w"))
    assert (await store.find_by_session_key("agent:beta:acp:s2")) == await store.get_session("s2")
    assert await store.find_by_session_key("agent:none:acp:x") is None


async def test_spec8_append_turn_round_trip(store: SessionStore) -> None:
    """SPEC §8: a whole turn is stored and read back in order, tool payloads once each."""
    await store.create_session(NewSession("s1", "a", "/w"))
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


async def test_a_result_after_its_turn_is_an_entry_of_its_own(store: SessionStore) -> None:
    """A tool call that finished after its turn was stored (a v2 agent's child ending late)
    is appended alone, without a user item: it follows its turn, leaves the title and the
    token count alone, and reads back after the call it finishes."""
    await store.create_session(NewSession("s1", "a", "/w"))
    await store.append_turn("s1", _turn("first question")[:3], token_delta=4)
    late = await store.append_turn("s1", [HistoryEntry(
        role="tool_result", tool_call_id="tc-1", output="late answer", status="completed")])
    assert (late.turn, late.first_seq, late.last_seq) == (2, 4, 4)
    items = await _history(store, "s1")
    assert [(i.role, i.tool_call_id, i.output) for i in items[2:]] == [
        ("tool_call", "tc-1", ""), ("tool_result", "tc-1", "late answer")]
    rec = await store.get_session("s1")
    assert (rec.title, rec.token_count, rec.message_count) == ("first question", 4, 4)


async def test_spec8_turn_is_all_or_nothing(store: SessionStore) -> None:
    """SPEC §8: a bad item after good ones rolls the whole turn back; so does an unknown id."""
    await store.create_session(NewSession("s1", "a", "/w"))
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
    await store.create_session(NewSession("s1", "a", "/w"))
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
    """session/list title: the first prompt's first line, ≤ 80 chars."""
    await store.create_session(NewSession("s1", "a", "/w"))
    long = "\n  line   one \n\n  line   two " + "x" * 200
    await store.append_turn("s1", [HistoryEntry(role="user", text=long)])
    await store.append_turn("s1", [HistoryEntry(role="user", text="later")])
    assert (await store.get_session("s1")).title == "line one"
    await store.create_session(NewSession("s2", "a", "/w"))
    await store.append_turn("s2", [HistoryEntry(role="user", text="y" * 200 + "\nz")])
    title = (await store.get_session("s2")).title
    assert len(title) == 80 and title.endswith("…")
    assert make_title("short") == "short"


async def test_spec8_last_activity_moves_forward(backend: Backend) -> None:
    """last_activity: set at creation, bumped by touch and by each turn, never backwards."""
    clock = FakeClock(1000)
    s = await backend.open(clock)
    rec = await s.create_session(NewSession("s1", "a", "/w"))
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


async def test_update_session_fields(store: SessionStore) -> None:
    """UpdateSession changes only the given fields."""
    await store.create_session(NewSession("s1", "a", "/w"))
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


async def test_list_sessions_order_and_cwd(backend: Backend) -> None:
    """Rows come newest activity first, after a position, optionally for one cwd."""
    clock = FakeClock(10)
    s = await backend.open(clock)
    for i, ws in enumerate(["/a", "/b", "/a"]):
        clock.now = 10 + i
        await s.create_session(NewSession(f"s{i}", "x", ws))
    assert [r.session_id for r in await s.list_sessions()] == ["s2", "s1", "s0"]
    assert [r.session_id for r in await s.list_sessions(cwd="/a")] == ["s2", "s0"]
    assert [r.session_id for r in await s.list_sessions(after=(11, "s1"))] == ["s0"]
    assert [r.session_id for r in await s.list_sessions(limit=1)] == ["s2"]


async def test_mcp_server_list_per_session(store: SessionStore) -> None:
    """A row keeps the client's MCP server list (a JSON array), replaced when set,
    kept by other updates, refused when it is not an array."""
    listed = '[{"name": "fs", "command": "/bin/fs", "args": [], "env": []}]'
    rec = await store.create_session(NewSession("n1", "a", "/w", mcp_servers_json=listed))
    assert rec.mcp_servers_json == listed
    assert (await store.create_session(NewSession("n0", "a", "/w"))).mcp_servers_json == ""
    assert (await store.update_session("n1", title="x")).mcp_servers_json == listed  # unchanged
    assert (await store.update_session("n0", mcp_servers_json="[]")).mcp_servers_json == "[]"
    with pytest.raises(InvalidItem, match="must be a JSON array"):
        await store.update_session("n1", mcp_servers_json='{"name": "fs"}')
    with pytest.raises(InvalidItem, match="not valid JSON"):
        await store.create_session(NewSession("n2", "a", "/w", mcp_servers_json="["))
    assert (await store.get_session("n1")).mcp_servers_json == listed


# ------------------------------------------------------------------ concurrency


async def test_spec8_concurrent_appends_from_several_connections(backend: Backend) -> None:
    """Several connections (as several processes or hosts would) append turns at once: no turn
    is lost, none interleaves, seq numbers stay dense."""
    stores = [await backend.open() for _ in range(4)]
    await stores[0].create_session(NewSession("s1", "a", "/w"))
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



async def test_concurrent_first_open_migrates_once(backend: Backend) -> None:
    """Several stores opening a fresh database at once (as several hosts starting together
    would) all end up persistent on one schema, migrated once."""
    await backend.target()
    stores = await asyncio.gather(*(backend.open() for _ in range(5)))
    assert all(s.status.schema_version == LATEST_SCHEMA_VERSION for s in stores)
    await stores[0].create_session(NewSession("s1", "a", "/w"))
    assert (await stores[4].get_session("s1")).workspace_dir == "/w"
    assert await backend.count("SELECT COUNT(*) FROM schema_version") == 1


# ------------------------------------------------------------------ text


async def test_free_text_round_trips_exactly(store: SessionStore) -> None:
    """Whatever a turn carries comes back byte for byte — NUL (a tool's binary output,
    which PostgreSQL text cannot hold as such), the escape code point, any Unicode."""
    odd = "bin\x00ary \ue000 \ue0000 \\x00 é 🚀 \x01\x7f\n"
    await store.create_session(NewSession("s1", "a", "/w"))
    await store.append_turn("s1", [
        HistoryEntry(role="user", text=f"\x00 {odd}"),
        HistoryEntry(role="tool_call", tool_call_id=f"t{odd}", tool_name=odd, tool_kind=odd,
                     title=odd, arguments_json='{"k": "\\u0000"}'),
        HistoryEntry(role="tool_result", tool_call_id=f"t{odd}", output=odd * 3,
                     content_json='["\\u0000"]'),
    ])
    items = await _history(store, "s1")
    assert items[0].text == f"\x00 {odd}"
    assert (items[1].tool_call_id, items[1].tool_name, items[1].title) == (f"t{odd}", odd, odd)
    assert items[2].output == odd * 3 and items[2].content_json == '["\\u0000"]'
    rec = await store.get_session("s1")
    assert rec.title == make_title(f"\x00 {odd}")
    rec = await store.update_session("s1", title=odd, adapter_session_id=f"ad{odd}")
    assert (rec.title, rec.adapter_session_id) == (make_title(odd), f"ad{odd}")
    assert await store.get_session("s1") == rec


async def test_nul_in_identifiers_is_refused_or_unknown(store: SessionStore) -> None:
    """A NUL in an id, alias, workspace or link is refused when writing and is an unknown
    row when reading — never a driver error."""
    for args, kw in ((("s\x00", "a", "/w"), {}), (("s", "a\x00", "/w"), {}),
                     (("s", "a", "/w\x00"), {}), (("s", "a", "/w"), {"spawned_by": "x\x00"})):
        with pytest.raises(InvalidItem):
            await store.create_session(NewSession(*args, **kw))
    await store.create_session(NewSession("s", "a", "/w"))
    with pytest.raises(InvalidItem):
        await store.update_session("s", agent_alias="b\x00")
    for call in (store.get_session("s\x00"), store.touch("s\x00"),
                 store.append_turn("s\x00", [HistoryEntry(role="user", text="x")]),
                 store.update_session("s\x00", state="inactive")):
        with pytest.raises(SessionNotFound):
            await call
    assert await store.find_by_session_key("agent:a\x00") is None
    assert await store.list_sessions(cwd="/w\x00") == []
    assert [r.session_id for r in await store.list_sessions()] == ["s"]
