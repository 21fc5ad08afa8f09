"""Lease store and instance id: durability, compare-and-set transitions, retention."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from services.lifecycle.instance import load_or_create_instance_id
from services.lifecycle.leases import LeaseRecord, LeaseState, LeaseStore


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
    from services.lifecycle.server import open_controller
    from services.lifecycle.spawn import stderr_log_path
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
