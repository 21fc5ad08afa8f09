"""Storage quotas, on every backend.

A running byte total per row (``stored_bytes``) and per owner (``owner_usage``),
counted from the stored items (:func:`item_bytes`: UTF-8 bytes of the role and the
item fields). A turn that would take its session or its owner over a limit is
refused in the turn's own transaction — QuotaExceeded, with the client-facing
sentence, nothing written; other owners are not affected; a deleted session's
bytes leave its owner's total; a v6 database gets its totals computed. The event log's
events count in the same totals (a part past a quota writes none of them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiosqlite
import asyncpg
import pytest

from services.common.protocol import MSG_SESSION_QUOTA, MSG_TOKEN_QUOTA, REFUSED_QUOTA
from services.session.store import HistoryEntry, NewSession, Quota, QuotaExceeded, SessionStore
from services.session.store.event_log import LoggedEvent, SessionBatch, TurnMark
from services.session.store.postgres.db import PostgresTarget
from services.session.store.postgres.schema import _STEPS
from services.session.store.records import item_bytes
from services.session.store.sqlite.db import connect
from services.session.store.sqlite.schema import _MIGRATIONS
from tests.session.conftest import Backend, FakeClock


def turn(text: str) -> list[HistoryEntry]:
    return [HistoryEntry(role="user", text=text), HistoryEntry(role="assistant", text="ok")]


def size(items: list[HistoryEntry]) -> int:
    return sum(map(item_bytes, items))


async def owner_total(backend: Backend, owner: str) -> int:
    return await backend.count(
        f"SELECT COALESCE(SUM(stored_bytes), 0) FROM owner_usage"
        f" WHERE owner_session_key = '{owner}'")


def test_item_bytes_are_utf8_bytes() -> None:
    entry = HistoryEntry(role="tool_result", tool_call_id="c1", output="héllo ✓",
                         status="completed", content_json="[]")
    assert item_bytes(entry) == len("tool_result") + len("c1") + len("héllo ✓".encode()) \
        + len("completed") + len("[]")


async def test_session_quota(store: SessionStore, backend: Backend) -> None:
    """Under the limit a turn is stored and counted; the turn that would pass it is refused
    whole, saying how much and which key to raise; 0 is unlimited."""
    await store.create_session(NewSession("s1", "a", "/w", owner_session_key="client:t1"))
    first, second = turn("x" * 600), turn("y" * 600)
    limit = size(first) + size(second) - 1
    quota = Quota(session_bytes=limit)
    await store.append_turn("s1", first, quota=quota)
    rec = await store.get_session("s1")
    assert rec.stored_bytes == size(first) and await owner_total(backend, "client:t1") == size(first)
    with pytest.raises(QuotaExceeded) as refused:
        await store.append_turn("s1", second, token_delta=7, plan_json="[]", quota=quota)
    assert str(refused.value) == MSG_SESSION_QUOTA.format(used=size(first) + size(second),
                                                          limit=limit)
    after = await store.get_session("s1")
    assert (after.message_count, after.stored_bytes, after.token_count, after.plan_json) == (
        2, size(first), 0, "")
    assert await owner_total(backend, "client:t1") == size(first)
    await store.append_turn("s1", second, quota=Quota(session_bytes=0))  # unlimited
    assert (await store.get_session("s1")).stored_bytes == size(first) + size(second)


async def test_owner_quota_spans_sessions_and_spares_other_owners(
        store: SessionStore, backend: Backend) -> None:
    """One owner's sessions share its quota; another owner is not affected; deleting a
    session gives its bytes back."""
    one = turn("z" * 500)
    quota = Quota(owner_bytes=2 * size(one) + 10)
    for sid in ("a1", "a2", "a3"):
        await store.create_session(NewSession(sid, "a", "/w", owner_session_key="client:alice"))
    await store.create_session(NewSession("b1", "a", "/w", owner_session_key="client:bob"))
    await store.append_turn("a1", one, quota=quota)
    await store.append_turn("a2", one, quota=quota)
    with pytest.raises(QuotaExceeded) as refused:
        await store.append_turn("a3", one, quota=quota)
    assert str(refused.value) == MSG_TOKEN_QUOTA.format(used=3 * size(one),
                                                        limit=quota.owner_bytes)
    assert (await store.get_session("a3")).message_count == 0
    assert await owner_total(backend, "client:alice") == 2 * size(one)
    await store.append_turn("b1", one, quota=quota)  # bob has his own
    assert await owner_total(backend, "client:bob") == size(one)
    assert await store.delete_session("a1")
    assert await owner_total(backend, "client:alice") == size(one)
    await store.append_turn("a3", one, quota=quota)
    assert await owner_total(backend, "client:alice") == 2 * size(one)


async def test_migration_computes_the_totals_of_stored_history(backend: Backend) -> None:
    """A v6 database (rows and history, no byte totals) opens at v7 with each row's bytes and
    each owner's total counted from the history already stored, in UTF-8 bytes."""
    rows = {"m1": ("client:t1", ["héllo", "wörld ✓"]), "m2": ("client:t1", ["abc"]),
            "m3": ("client:t2", [])}
    await _write_v6(backend, rows)
    store = await backend.open(FakeClock())
    expected: dict[str, int] = {}
    for sid, (owner, texts) in rows.items():
        want = sum(item_bytes(HistoryEntry(role="user", text=t)) for t in texts)
        assert (await store.get_session(sid)).stored_bytes == want
        expected[owner] = expected.get(owner, 0) + want
    for owner, total in expected.items():
        assert await owner_total(backend, owner) == total
    with pytest.raises(QuotaExceeded):  # the migrated total counts against the quota
        await store.append_turn("m2", turn("n"), quota=Quota(owner_bytes=expected["client:t1"]))


async def _write_v6(backend: Backend, rows: dict[str, tuple[str, list[str]]]) -> None:
    """The database at schema v6, holding ``rows``."""
    target = await backend.target()
    inserts = []
    for sid, (owner, texts) in rows.items():
        inserts.append(("INSERT INTO sessions (id, agent_alias, workspace_dir, created_at,"
                        " last_activity, owner_session_key, last_seq, last_turn)"
                        " VALUES ($1, 'a', '/w', 0, 0, $2, $3, 1)", (sid, owner, len(texts))))
        for seq, text in enumerate(texts, start=1):
            inserts.append(("INSERT INTO history (session_id, seq, turn, role, text, created_at)"
                            " VALUES ($1, $2, 1, 'user', $3, 0)", (sid, seq, text)))
    if isinstance(target, PostgresTarget):
        con = await asyncpg.connect(target.url)
        try:
            version = 0
            while version < 6:
                version, step = _STEPS[version]
                await step(con)
            await con.execute("INSERT INTO schema_version (version) VALUES (6)")
            for sql, args in inserts:
                await con.execute(sql, *args)
        finally:
            await con.close()
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    db: aiosqlite.Connection = await connect(str(target))
    try:
        for version in range(6):
            await _MIGRATIONS[version](db, 0)
        await db.execute("INSERT INTO schema_version (version) VALUES (6)")
        for sql, args in inserts:
            await db.execute(sql.replace("$1", "?").replace("$2", "?").replace("$3", "?"), args)
    finally:
        await db.close()


def logged(event_id: int, size: int, turn_id: int = 0) -> LoggedEvent:
    return LoggedEvent(event_id, turn_id, "update", b"u" * size, 1)


async def test_logged_events_count_against_the_quotas(store: SessionStore,
                                                      backend: Backend) -> None:
    """The event log counts like history: a part that would pass a quota writes none of
    its events (the quota's sentence says why) while the batch's other parts are written;
    its turn ends still end the turns already started; a part sent again adds nothing."""
    for sid in ("s1", "s2"):
        await store.create_session(NewSession(sid, "a", "/w", owner_session_key="client:t1"))
    first = turn("x" * 600)
    quota = Quota(session_bytes=size(first) + 1000, owner_bytes=10_000)
    await store.append_turn("s1", first, quota=quota)
    batch = SessionBatch("s1", [logged(1, 400, 1), logged(2, 500, 1)],
                         [TurnMark(1, "running", 1)])
    assert await store.append_events([batch], quota=quota) == [""]
    assert await store.append_events([batch], quota=quota) == [""]  # sent again: counted once
    rec = await store.get_session("s1")
    assert rec.stored_bytes == size(first) + 900
    assert await owner_total(backend, "client:t1") == size(first) + 900

    over = SessionBatch("s1", [logged(3, 101, 1)], [TurnMark(1, "failed", 2)])
    other = SessionBatch("s2", [logged(1, 101)])
    refused, written = await store.append_events([over, other], quota=quota)
    assert refused == REFUSED_QUOTA + MSG_SESSION_QUOTA.format(
        used=size(first) + 1001, limit=size(first) + 1000)
    assert written == ""
    assert [e.event_id async for e in _events(store, "s1")] == [1, 2]
    assert await store.turn_states("s1") == {1: "failed"}
    assert (await store.get_session("s1")).stored_bytes == size(first) + 900
    assert await owner_total(backend, "client:t1") == size(first) + 1001

    # the owner's quota: s2 has room of its own, its owner has not
    tight = Quota(owner_bytes=size(first) + 1001 + 99)
    (refused,) = await store.append_events([SessionBatch("s2", [logged(2, 100)])], quota=tight)
    assert refused == REFUSED_QUOTA + MSG_TOKEN_QUOTA.format(used=size(first) + 1101,
                                                             limit=size(first) + 1100)
    assert await store.append_events([SessionBatch("s2", [logged(2, 99)])], quota=tight) == [""]

    # a fork copies the history, not the log: it counts the history's bytes only
    fork = await store.fork_session("s1", "f1", agent_alias="a", gateway_instance_id="gw",
                                    claim_ttl_ms=30_000)
    assert fork.stored_bytes == size(first)
    # deleting gives everything back, log included
    assert await store.delete_session("s1")
    assert await owner_total(backend, "client:t1") == 200 + size(first)


async def _events(store: SessionStore, sid: str) -> AsyncIterator[LoggedEvent]:
    async for page in store.iter_events(sid):
        for event in page:
            yield event


async def test_a_part_with_nothing_new_passes_a_quota_already_full(
        store: SessionStore, backend: Backend) -> None:
    """Events already stored, sent again once the session is past its quota (the quota
    lowered since), are no refusal: they add nothing; their turn marks are written, and a
    part with a new event is still refused."""
    await store.create_session(NewSession("s1", "a", "/w", owner_session_key="client:t1"))
    batch = SessionBatch("s1", [logged(1, 400, 1)], [TurnMark(1, "running", 1)])
    assert await store.append_events([batch], quota=Quota(session_bytes=1000)) == [""]
    full = Quota(session_bytes=100, owner_bytes=100)
    again = SessionBatch("s1", [logged(1, 400, 1)], [TurnMark(1, "completed", 2)])
    assert await store.append_events([again], quota=full) == [""]
    assert await store.turn_states("s1") == {1: "completed"}
    (refused,) = await store.append_events([SessionBatch("s1", [logged(2, 1, 1)])],
                                           quota=full)
    assert refused == REFUSED_QUOTA + MSG_SESSION_QUOTA.format(used=401, limit=100)
    assert (await store.get_session("s1")).stored_bytes == 400
    assert await owner_total(backend, "client:t1") == 400
