"""Legacy records from file to outcome, on the simulated process table.

What the startup of slot 0 does with the pre-lease records waiting in
``<state>/legacy/`` (:mod:`services.lifecycle.startup.legacy_records`): import once, reap through
the fail-safe path, store every outcome (closed / lost / left, with the reason), never
process an ended record again — and what no other slot does. The guards beyond the
seed's rules (a lease's process, the service's own tree, another install's wrapper root)
are table rows here; tests/security/test_legacy_records.py runs them on real processes.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from services.lifecycle.adapters.spawn import WrapperPaths
from services.lifecycle.controller import LifecycleController
from services.lifecycle.leases.instance_slots import try_slot
from services.lifecycle.leases.store import LeaseStore
from services.lifecycle.processes.table import FakeProc, FakeProcessTable, ProcInfo
from services.lifecycle.processes.verify import (
    LEASE_ENV,
    REASON_BIRTH,
    REASON_COMMAND,
    REASON_LISTING,
    REASON_ROOT_GONE,
    REASON_WRAPPER_ROOT,
    Owner,
)
from services.lifecycle.reaping.legacy import (
    REASON_FOREIGN_ROOT,
    REASON_LEASED,
    REASON_PROTECTED,
    LegacyRecord,
    LegacyState,
)
from services.lifecycle.reaping.legacy_files import LEGACY_DIR_NAME, parse_records
from services.lifecycle.reaping.legacy_files import LegacyFile as ReadFile
from services.lifecycle.reaping.legacy_table import LegacyStore
from services.lifecycle.reaping.reaper import Reaper
from services.lifecycle.startup.legacy_records import reap_legacy

INSTANCE = "gw-aaaa"
ROOT = "/srv/gw-a/lifecycle/wrapper"
OTHER_ROOT = "/srv/gw-b/lifecycle/wrapper"
PY = "/usr/bin/python3"


@pytest.fixture
async def store(tmp_path: Path):
    s = await LeaseStore.open(tmp_path / "leases.db")
    yield s
    await s.close()


def reaper(store: LeaseStore, table: FakeProcessTable) -> Reaper:
    return Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=10)


@pytest.mark.parametrize(
    ("name", "record", "procs", "protect", "state", "reason", "signalled"),
    [
        ("matching command: closed, children first",
         LegacyRecord(300, "/opt/agent --acp"),
         [FakeProc(300, 1, 300, 5, ("/opt/agent", "--acp")), FakeProc(301, 300, 300, 6, ("c",))],
         0, LegacyState.CLOSED, "", [301, 300]),
        ("wrapper record without a root: this install's",
         LegacyRecord(300, "", expects_wrapper=True),
         [FakeProc(300, 1, 300, 5, (PY, f"{ROOT}/old_wrapper.py"))],
         0, LegacyState.CLOSED, "", [300]),
        ("wrapper record naming this install's root",
         LegacyRecord(300, "", wrapper_root=f"{ROOT}/", expects_wrapper=True),
         [FakeProc(300, 1, 300, 5, (PY, f"{ROOT}/old_wrapper.py"))],
         0, LegacyState.CLOSED, "", [300]),
        ("wrapper record naming another install's root (its wrapper lives there)",
         LegacyRecord(300, "", wrapper_root=OTHER_ROOT, expects_wrapper=True),
         [FakeProc(300, 1, 300, 5, (PY, f"{OTHER_ROOT}/acpgate_wrapper.py"))],
         0, LegacyState.LEFT, REASON_FOREIGN_ROOT, []),
        ("wrapper record whose PID runs another install's wrapper",
         LegacyRecord(300, "", expects_wrapper=True),
         [FakeProc(300, 1, 300, 5, (PY, f"{OTHER_ROOT}/acpgate_wrapper.py"))],
         0, LegacyState.LEFT, REASON_WRAPPER_ROOT, []),
        ("PID reused by a stranger",
         LegacyRecord(300, "/opt/agent --acp"),
         [FakeProc(300, 1, 300, 5, ("/usr/bin/postgres",))],
         0, LegacyState.LEFT, REASON_COMMAND, []),
        ("process gone: lost, nothing signalled",
         LegacyRecord(300, "/opt/agent --acp"),
         [FakeProc(999, 1, 999, 5, ("/opt/agent", "--acp"))],
         0, LegacyState.LOST, REASON_ROOT_GONE, []),
        ("another birth on the PID: lost",
         LegacyRecord(300, "/opt/agent", start_time=4),
         [FakeProc(300, 1, 300, 5, ("/opt/agent",))],
         0, LegacyState.LOST, REASON_BIRTH, []),
        ("a live slot's wrapper under the same root carries its lease id",
         LegacyRecord(300, "", expects_wrapper=True),
         [FakeProc(300, 1, 300, 5, (PY, "-I", "-S", f"{ROOT}/acpgate_wrapper.py"),
                   environ={LEASE_ENV: "lease-9"})],
         0, LegacyState.LEFT, REASON_LEASED, []),
        ("a lease's adapter running exactly the stored command",
         LegacyRecord(300, "/opt/agent --acp"),
         [FakeProc(300, 1, 300, 5, ("/opt/agent", "--acp")),
          FakeProc(301, 300, 300, 6, ("c",), environ={LEASE_ENV: "lease-9"})],
         0, LegacyState.LEFT, REASON_LEASED, []),
        ("the stored command matches the shell the service runs under",
         LegacyRecord(300, "bash"),
         [FakeProc(300, 1, 300, 5, ("bash",)), FakeProc(301, 300, 301, 6, ("acpgate", "acp"))],
         301, LegacyState.LEFT, REASON_PROTECTED, []),
    ],
)
async def test_close_legacy_outcomes(
    name: str, record: LegacyRecord, procs: list[FakeProc], protect: int, state: LegacyState,
    reason: str, signalled: list[int], store: LeaseStore,
) -> None:
    table = FakeProcessTable(procs)
    result = await reaper(store, table).close_legacy(record, protect=protect)
    assert [pid for pid, _, _ in table.signals] == signalled
    assert (result.state, result.unverified_reason) == (state, reason)
    assert result.lease is None
    assert set(result.terminated_pids) == set(signalled)


async def test_close_legacy_listing_unavailable_is_left(store: LeaseStore) -> None:
    table = FakeProcessTable([FakeProc(300, 1, 300, 5, ("agent",))])
    table.listing_available = False
    result = await reaper(store, table).close_legacy(LegacyRecord(300, "agent"))
    assert table.signals == [] and result.state == LegacyState.LEFT
    assert REASON_LISTING in result.unverified_reason


async def test_store_imports_a_file_once_and_ends_a_record_once(store: LeaseStore,
                                                                tmp_path: Path) -> None:
    records = parse_records(b'{"pid": 300, "command": "a"}\n{"pid": 301, "wrapper": true}\n')
    file = ReadFile(tmp_path / "old.jsonl", "digest-1", records)
    legacy = await LegacyStore.open(store.path)
    try:
        assert await legacy.import_file(file, now_ms=5) == 2
        assert await legacy.import_file(file, now_ms=6) == 0  # same content: nothing new
        renamed = ReadFile(tmp_path / "copy.jsonl", "digest-1", records)
        assert await legacy.import_file(renamed, now_ms=7) == 0
        rows = await legacy.list(states=(LegacyState.PENDING,))
        assert [(r.source, r.line, r.pid, r.expects_wrapper, r.imported_at) for r in rows] == [
            ("old.jsonl", 1, 300, False, 5), ("old.jsonl", 2, 301, True, 5)]
        table = FakeProcessTable([FakeProc(300, 1, 300, 5, ("a",))])
        result = await reaper(store, table).close_legacy(rows[0].record())
        assert await legacy.finish(rows[0], result, now_ms=9)
        assert not await legacy.finish(rows[0], result, now_ms=10)  # ended once
        (ended,) = await legacy.list(states=(LegacyState.CLOSED,))
        assert (ended.record_id, ended.processed_at, ended.terminated_pids) == (
            rows[0].record_id, 9, (300,))
    finally:
        await legacy.close()


def controller_on(slot_number: int, tmp_path: Path, store: LeaseStore,
                  table: FakeProcessTable) -> LifecycleController:
    slot = try_slot(tmp_path, slot_number)
    assert slot is not None
    return LifecycleController(
        store=store, table=table, instance_id=INSTANCE, install_id=INSTANCE, slot=slot,
        state_dir=tmp_path, wrapper=WrapperPaths(Path(ROOT), Path(f"{ROOT}/acpgate_wrapper.py")),
        term_grace_ms=10, retention_secs=3600)


def drop(tmp_path: Path, name: str, *records: dict[str, object]) -> Path:
    directory = tmp_path / LEGACY_DIR_NAME
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.chmod(path, 0o600)
    return path


async def test_only_the_holder_of_slot_0_imports_and_reaps(store: LeaseStore,
                                                           tmp_path: Path) -> None:
    table = FakeProcessTable([FakeProc(300, 1, 300, 5, ("/opt/agent",))])
    path = drop(tmp_path, "old.jsonl", {"pid": 300, "command": "/opt/agent"},
                {"pid": 777, "command": "/opt/gone"})
    other = controller_on(1, tmp_path, store, table)
    try:
        assert await reap_legacy(other) == []
    finally:
        assert other.slot is not None
        other.slot.release()
    assert path.exists() and table.signals == []

    first = controller_on(0, tmp_path, store, table)
    try:
        results = await reap_legacy(first)
        assert [r.state for r in results] == [LegacyState.CLOSED, LegacyState.LOST]
        assert not path.exists() and path.with_name("old.jsonl.imported").exists()
        assert table.signalled_pids() == {300}
        # The same records dropped again, and a restart: nothing is processed twice.
        table.add(FakeProc(300, 1, 300, 5, ("/opt/agent",)))  # as if the PID were that again
        drop(tmp_path, "again.jsonl", {"pid": 300, "command": "/opt/agent"},
             {"pid": 777, "command": "/opt/gone"})
        signals = len(table.signals)
        assert await reap_legacy(first) == []
        assert len(table.signals) == signals
    finally:
        assert first.slot is not None
        first.slot.release()


async def test_no_legacy_dir_opens_nothing(store: LeaseStore, tmp_path: Path) -> None:
    controller = controller_on(0, tmp_path, store, FakeProcessTable())
    try:
        assert await reap_legacy(controller) == []
    finally:
        assert controller.slot is not None
        controller.slot.release()
    with sqlite3.connect(f"file:{store.path}?mode=ro", uri=True) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE name = 'legacy_records'")
        assert tables.fetchall() == []


async def test_a_record_whose_processing_fails_stays_pending(store: LeaseStore,
                                                            tmp_path: Path) -> None:
    class Broken(FakeProcessTable):
        async def list_all(self) -> list[ProcInfo]:
            raise RuntimeError("table exploded")

    drop(tmp_path, "old.jsonl", {"pid": 300, "command": "/opt/agent"})
    controller = controller_on(0, tmp_path, store, Broken())
    try:
        assert await reap_legacy(controller) == []
        controller.table = controller.reaper.table = FakeProcessTable(
            [FakeProc(300, 1, 300, 5, ("/opt/agent",))])
        (result,) = await reap_legacy(controller)  # the next start tries again
        assert result.state == LegacyState.CLOSED
    finally:
        assert controller.slot is not None
        controller.slot.release()
