"""The store file's diagnosis (read-only) and its repair, on files made here: each state
``acpgate store check`` reports, and what a repair keeps, refuses and writes."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from services.common.log_forms import FORM_TEXT_CHUNKS
from services.session.store import EventChunk, HistoryEntry, NewSession, SessionBatch, open_store
from services.session.store.sqlite.diagnosis import (
    DAMAGED,
    MISSING,
    NEWER,
    NOT_A_FILE,
    OK,
    diagnose,
)
from services.session.store.sqlite.salvage import RepairRefused, repair_store, salvage_into


async def _store(db: Path, sessions: int) -> None:
    store = await open_store(db)
    for i in range(sessions):
        await store.create_session(NewSession(f"s{i}", "a", "/w"))
        await store.append_turn(f"s{i}", [HistoryEntry(role="user", text=f"hi {i}")])
    await store.close()


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "data" / "sessions" / "acp-sessions.db"
    db.parent.mkdir(parents=True)
    return db


async def test_each_state_of_the_file(tmp_path: Path) -> None:
    db = _db(tmp_path)
    assert diagnose(db).state == MISSING
    await _store(db, 2)
    found = diagnose(db)
    assert (found.state, found.sessions, found.history_items) == (OK, 2, 2)
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = 99")
    con.commit()
    con.close()
    assert diagnose(db).state == NEWER
    db.write_bytes(b"not a database at all" * 100)
    assert diagnose(db).state == DAMAGED and "not a SQLite" in diagnose(db).problem
    db.unlink()
    os.mkfifo(db)
    assert diagnose(db).state == NOT_A_FILE  # not opened: a FIFO would block the reader


async def test_an_intact_or_newer_store_is_not_repaired(tmp_path: Path) -> None:
    db = _db(tmp_path)
    await _store(db, 1)
    with pytest.raises(RepairRefused, match="needs no repair"):
        await repair_store(db, tmp_path / "data", 0)
    assert sorted(p.name for p in db.parent.iterdir() if "damaged" in p.name) == []


async def test_a_file_with_nothing_readable_becomes_an_empty_store(tmp_path: Path) -> None:
    db = _db(tmp_path)
    junk = b"SQLite format 3\x00" + b"\xff" * 8000
    db.write_bytes(junk)
    done = await repair_store(db, tmp_path / "data", 0)
    assert (done.sessions, done.history_items) == (0, 0)
    assert (db.parent / os.path.basename(done.moved_to)).read_bytes() == junk
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    store = await open_store(db)
    assert store.persistent
    await store.close()
    assert sorted(p.name for p in db.parent.iterdir() if ".repair-" in p.name) == []


async def test_the_event_logs_chunks_are_salvaged_whole(tmp_path: Path) -> None:
    db = _db(tmp_path)
    store = await open_store(db)
    await store.create_session(NewSession("s", "a", "/w"))
    await store.append_events([SessionBatch("s", chunks=[
        EventChunk(10, 12, 10, "update", b"a\nb\nc", 1, b"line "),
        EventChunk(13, 14, 10, "update", b"x\ny", 1, b"head:", FORM_TEXT_CHUNKS)])])
    before = [e async for page in store.iter_events("s") for e in page]
    await store.close()
    fresh = db.with_name("fresh.db")
    await (await open_store(fresh)).close()
    salvage_into(db, fresh)
    copy = await open_store(fresh)
    try:
        assert [e async for page in copy.iter_events("s") for e in page] == before
        assert [e.event_id for e in before] == [10, 11, 12, 13, 14]
    finally:
        await copy.close()
