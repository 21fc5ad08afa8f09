"""Lease store and instance id: durability, compare-and-set transitions, retention."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore


def lease(lease_id: str, **kw: object) -> LeaseRecord:
    base: dict[str, object] = {
        "lease_id": lease_id,
        "gateway_instance_id": "gw-1",
        "session_key": "agent:a:acp:1",
        "wrapper_root": "/w",
        "wrapper_path": "/w/x.py",
        "command_hash": "h",
        "started_at": 1,
    }
    base.update(kw)
    return LeaseRecord(**base)  # type: ignore[arg-type]


async def test_instance_id_is_stable_across_restarts(tmp_path: Path) -> None:
    first = await load_or_create_instance_id(tmp_path / "lc")
    second = await load_or_create_instance_id(tmp_path / "lc")
    other = await load_or_create_instance_id(tmp_path / "other")
    assert first == second and first.startswith("gw-")
    assert other != first
    assert (tmp_path / "lc" / "instance-id").read_text().strip() == first


async def test_concurrent_first_start_agrees_on_one_id(tmp_path: Path) -> None:
    ids = await asyncio.gather(*(load_or_create_instance_id(tmp_path / "lc") for _ in range(8)))
    assert len(set(ids)) == 1


async def test_insert_is_durable_before_returning(tmp_path: Path) -> None:
    store = await LeaseStore.open(tmp_path / "leases.db")
    try:
        await store.insert(lease("a"))
        # Another connection (another process, e.g. after a crash) sees the pending lease.
        with sqlite3.connect(tmp_path / "leases.db") as db:
            row = db.execute("SELECT root_pid, state FROM leases WHERE lease_id='a'").fetchone()
        assert row == (0, "open")
    finally:
        await store.close()


async def test_transitions_are_compare_and_set(tmp_path: Path) -> None:
    store = await LeaseStore.open(tmp_path / "leases.db")
    try:
        rec = await store.insert(lease("a"))
        closing = await store.transition(rec, LeaseState.CLOSING)
        assert closing is not None and closing.state == LeaseState.CLOSING
        # A stale view (still "open") cannot move the lease again.
        assert await store.transition(rec, LeaseState.CLOSED, now_ms=5) is None
        closed = await store.transition(closing, LeaseState.CLOSED, now_ms=5)
        assert closed is not None and closed.state == LeaseState.CLOSED and closed.ended_at == 5
        assert await store.update("missing", state=LeaseState.OPEN) is None
    finally:
        await store.close()


async def test_list_filters_and_retention_bound(tmp_path: Path) -> None:
    store = await LeaseStore.open(tmp_path / "leases.db")
    try:
        await store.insert(lease("old", state=LeaseState.CLOSED, ended_at=1_000))
        await store.insert(lease("recent", state=LeaseState.LOST, ended_at=99_000))
        await store.insert(lease("open", started_at=2))
        await store.insert(lease("theirs", gateway_instance_id="gw-2", started_at=3))
        assert [x.lease_id for x in await store.list(states=[LeaseState.OPEN], instance_id="gw-1")] == ["open"]
        assert len(await store.list()) == 4
        expired = await store.expire(now_ms=100_000, retention_secs=10)
        assert expired == ["old"]
        assert {x.lease_id for x in await store.list()} == {"recent", "open", "theirs"}
        # Open leases never expire, however old.
        assert await store.expire(now_ms=10**12, retention_secs=10) == ["recent"]
        assert {x.lease_id for x in await store.list()} == {"open", "theirs"}
    finally:
        await store.close()


async def test_reopen_keeps_everything(tmp_path: Path) -> None:
    store = await LeaseStore.open(tmp_path / "leases.db")
    await store.insert(lease("a", root_pid=10, root_start_time=99, process_group_id=11, adapter_pid=11))
    await store.close()
    store = await LeaseStore.open(tmp_path / "leases.db")
    try:
        got = await store.get("a")
        assert got == lease("a", root_pid=10, root_start_time=99, process_group_id=11, adapter_pid=11)
    finally:
        await store.close()


async def test_controller_expiry_drops_old_leases_and_their_logs(tmp_path: Path) -> None:
    from services.lifecycle.adapters.spawn import stderr_log_path
    from services.lifecycle.api.server import open_controller
    from tests.lifecycle.conftest import make_config

    cfg = make_config(tmp_path / "gw")
    controller = await open_controller(cfg)
    try:
        await controller.store.insert(lease("gone", state=LeaseState.CLOSED, ended_at=1))
        log_path = stderr_log_path(controller.state_dir, "gone")
        log_path.write_text("old stderr\n")
        log_path.with_name(log_path.name + ".1").write_text("older stderr\n")
        assert await controller.expire() == ["gone"]
        assert await controller.store.get("gone") is None
        assert not log_path.exists() and not log_path.with_name(log_path.name + ".1").exists()
    finally:
        await controller.close_all()
        await controller.store.close()


# A lifecycle service's writes on a shared lease store, as one process of several: argv is
# the store path, this writer's instance id, how many leases, and a go-file to start on.
WRITER = r"""
import asyncio, os, sys, time
from pathlib import Path
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore

path, iid, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

async def main():
    while not os.path.exists(go):
        time.sleep(0.005)
    store = await LeaseStore.open(Path(path))
    try:
        for i in range(count):
            lease = LeaseRecord(lease_id=f"{iid}-{i}", gateway_instance_id=iid,
                                session_key=f"agent:a:acp:{i}", wrapper_root="/w",
                                wrapper_path="/w/x.py", command_hash="h", started_at=i)
            await store.insert(lease)
            await store.update(lease.lease_id, root_pid=1000 + i, durable=i % 2 == 0)
            (moved,) = await store.transition_many([(await store.get(lease.lease_id), LeaseState.CLOSING)])
            assert moved is not None
            assert await store.transition(moved, LeaseState.CLOSED, now_ms=1) is not None
            await store.expire(now_ms=0, retention_secs=0)
    finally:
        await store.close()

asyncio.run(main())
"""


async def test_several_processes_write_one_lease_store(tmp_path: Path) -> None:
    """Every lifecycle service on a data dir writes the one leases.db (each its own slot's
    leases): several real processes opening a fresh file at once and writing as fast as
    they can all succeed, and every write is there."""
    import os
    import sys

    from tests.lifecycle.conftest import REPO

    db, go, writers, count = tmp_path / "leases.db", tmp_path / "go", 4, 60
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(db), f"gw-x-s{n}", str(count), str(go),
        stderr=asyncio.subprocess.PIPE, env=env) for n in range(writers)]
    go.touch()  # all at once, on a file none has created yet
    results = await asyncio.gather(*(asyncio.wait_for(p.communicate(), 120) for p in procs))
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err.decode()
    store = await LeaseStore.open(db)
    try:
        rows = await store.list()
    finally:
        await store.close()
    assert len(rows) == writers * count
    assert {r.state for r in rows} == {LeaseState.CLOSED}
    assert {r.gateway_instance_id for r in rows} == {f"gw-x-s{n}" for n in range(writers)}
