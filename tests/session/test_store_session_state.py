"""A session's state in the store: extra roots, mode and config values, usage per turn, delete.

Runs on every backend (``backend`` / ``store`` fixtures): each must hold these the
same way (services/session/store/interface.py). The migrations that bring older
databases to them are tested per backend (test_store_sqlite.py, test_store_postgres.py).
"""

from __future__ import annotations

import pytest

from services.session.store import (
    HistoryEntry,
    InvalidItem,
    NewSession,
    SessionActiveElsewhere,
    SessionNotFound,
    SessionStore,
    TurnUsage,
)
from tests.session.conftest import Backend, FakeClock

TTL = 30_000


def _user(text: str = "hi") -> list[HistoryEntry]:
    return [HistoryEntry(role="user", text=text), HistoryEntry(role="assistant", text="ok")]


async def test_additional_directories_mode_and_config_are_stored(store: SessionStore) -> None:
    """``additionalDirectories`` stored on the row; mode and config re-applied on restore."""
    rec = await store.create_session(NewSession("s1", "a", "/w", additional_directories=("/x", "/y")))
    assert rec.additional_directories == ("/x", "/y")
    assert (rec.mode_id, rec.config_json) == ("", "")
    assert (await store.create_session(NewSession("s0", "a", "/w"))).additional_directories == ()
    rec = await store.update_session("s1", mode_id="readonly", config_json='{"model": "m2"}')
    assert (rec.mode_id, rec.config_json) == ("readonly", '{"model": "m2"}')
    rec = await store.update_session("s1", additional_directories=["/z"])
    assert rec.additional_directories == ("/z",) and rec.mode_id == "readonly"
    assert (await store.update_session("s1", state="inactive")).additional_directories == ("/z",)
    assert (await store.update_session("s1", additional_directories=[])).additional_directories == ()
    assert (await store.update_session("s1", config_json="")).config_json == ""
    for bad in ("{bad", "[1]"):
        with pytest.raises(InvalidItem, match="config_json"):
            await store.update_session("s1", config_json=bad)
    assert (await store.get_session("s1")).mode_id == "readonly"  # the refusals changed nothing


async def test_a_nul_in_a_directory_or_mode_is_refused(store: SessionStore) -> None:
    """Paths and mode ids are identifiers: a NUL is refused alike on every backend (PostgreSQL
    text cannot hold one), and nothing is written."""
    with pytest.raises(InvalidItem, match="NUL"):
        await store.create_session(NewSession("s1", "a", "/w", additional_directories=("/x\x00y",)))
    with pytest.raises(SessionNotFound):
        await store.get_session("s1")
    await store.create_session(NewSession("s1", "a", "/w"))
    with pytest.raises(InvalidItem, match="NUL"):
        await store.update_session("s1", mode_id="a\x00b")
    with pytest.raises(InvalidItem, match="NUL"):
        await store.update_session("s1", additional_directories=["/\x00"])
    rec = await store.get_session("s1")
    assert (rec.mode_id, rec.additional_directories) == ("", ())


async def test_usage_is_stored_per_turn_and_totalled(backend: Backend) -> None:
    """The edge records usage per turn; the row has the totals."""
    store = await backend.open()
    await store.create_session(NewSession("s1", "a", "/w"))
    await store.append_turn("s1", _user(), token_delta=15,
                            usage=TurnUsage(input_tokens=10, output_tokens=5, thought_tokens=2))
    await store.append_turn("s1", _user(), token_delta=0)  # an adapter that reports none
    await store.append_turn("s1", _user(), token_delta=4,
                            usage=TurnUsage(input_tokens=3, output_tokens=1, cached_read_tokens=7,
                                            cached_write_tokens=8))
    rec = await store.get_session("s1")
    assert (rec.input_tokens, rec.output_tokens, rec.token_count) == (13, 6, 19)
    assert await backend.count("SELECT COUNT(*) FROM turn_usage") == 2
    # One number per query (Backend.count): the per-turn rows, column by column.
    for column, per_turn in (("input_tokens", (10, 3)), ("output_tokens", (5, 1)),
                             ("thought_tokens", (2, 0)), ("cached_read_tokens", (0, 7)),
                             ("cached_write_tokens", (0, 8))):
        got = tuple([await backend.count(f"SELECT {column} FROM turn_usage WHERE turn = {t}")
                     for t in (1, 3)])
        assert got == per_turn, column
    with pytest.raises(InvalidItem, match="negative"):
        await store.append_turn("s1", _user(), usage=TurnUsage(input_tokens=-1))
    assert (await store.get_session("s1")).message_count == 6  # the refused turn left nothing
    assert await backend.count("SELECT COUNT(*) FROM turn_usage") == 2


async def test_delete_removes_row_history_and_usage(backend: Backend) -> None:
    """session/delete: the row and its history go in one transaction."""
    store = await backend.open()
    await store.create_session(NewSession("s1", "a", "/w"))
    await store.create_session(NewSession("s2", "a", "/w"))
    await store.append_turn("s1", _user(), usage=TurnUsage(input_tokens=1))
    await store.append_turn("s2", _user(), usage=TurnUsage(input_tokens=1))
    assert await store.delete_session("s1") is True
    assert await store.delete_session("s1") is False
    assert await store.delete_session("never") is False
    assert await store.delete_session("bad\x00id") is False
    with pytest.raises(SessionNotFound):
        await store.get_session("s1")
    assert await backend.count("SELECT COUNT(*) FROM history WHERE session_id = 's1'") == 0
    assert await backend.count("SELECT COUNT(*) FROM turn_usage WHERE session_id = 's1'") == 0
    assert await backend.count("SELECT COUNT(*) FROM history WHERE session_id = 's2'") == 2
    assert await backend.count("SELECT COUNT(*) FROM turn_usage WHERE session_id = 's2'") == 1
    assert [r.session_id for r in await store.list_sessions()] == ["s2"]
    # The id is free again: a new session under it starts empty.
    await store.create_session(NewSession("s1", "a", "/w"))
    assert (await store.append_turn("s1", _user())).first_seq == 1


async def test_delete_spares_a_session_another_host_serves(backend: Backend) -> None:
    """Several hosts: a delete on behalf of one instance never removes a session another
    instance's live claim holds (SessionActiveElsewhere, nothing removed); its own claim, no
    claim or an expired one (a dead host) do not stop it."""
    clock = FakeClock(1_000_000)
    store = await backend.open(clock)
    for sid in ("own", "free", "theirs"):
        await store.create_session(NewSession(sid, "a", "/w"))
        await store.append_turn(sid, _user())
    await store.claim("own", "gw-a", ttl_ms=TTL)
    await store.claim("theirs", "gw-b", host="host-b", ttl_ms=TTL)
    with pytest.raises(SessionActiveElsewhere) as info:
        await store.delete_session("theirs", holder="gw-a")
    assert info.value.claim.host == "host-b"
    assert (await store.get_session("theirs")).message_count == 2
    assert await store.delete_session("own", holder="gw-a") is True
    assert await store.delete_session("free", holder="gw-a") is True
    assert await store.delete_session("gone", holder="gw-a") is False
    clock.now += TTL + 1  # host b stopped renewing: its claim expired
    assert await store.delete_session("theirs", holder="gw-a") is True
    assert await store.list_sessions() == []
