"""Startup reaping of many leases in one pass (SPEC §13), on the simulated table.

One listing verifies every lease, every open lease is closing on disk before the
first signal, a lease with survivors is re-verified against a fresh listing right
before its SIGKILL, and the final states land in one transaction.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

import pytest

from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import FakeProc, FakeProcessTable, ProcInfo
from services.lifecycle.processes.verify import REASON_COMMAND, Owner, command_hash
from services.lifecycle.reaping.reaper import Reaper
from tests.lifecycle.test_simulator import (
    INSTANCE,
    PY,
    ROOT,
    WRAPPER,
    VirtualClock,
    marks,
    wrapper_argv,
)

ADAPTER = ("/opt/agents/bin/agent", "--acp")


def _lease(i: int) -> tuple[LeaseRecord, FakeProc, FakeProc]:
    lease_id = f"lease-{i}"
    wpid, apid = 5000 + 10 * i, 5001 + 10 * i
    argv = wrapper_argv(lease_id)
    lease = LeaseRecord(
        lease_id=lease_id, gateway_instance_id=INSTANCE, session_key=f"agent:a:acp:s{i}",
        wrapper_root=ROOT, wrapper_path=WRAPPER, command_hash=command_hash(argv),
        started_at=i, root_pid=wpid, root_start_time=20_000 + i, process_group_id=apid,
        adapter_pid=apid,
    )
    wrapper = FakeProc(wpid, 77, 77, 20_000 + i, argv, PY, marks(lease_id))
    adapter = FakeProc(apid, wpid, apid, 20_001 + i, ADAPTER, ADAPTER[0], marks(lease_id))
    return lease, wrapper, adapter


class CountingTable(FakeProcessTable):
    """Counts listings and records the lease states on disk at the first signal."""

    def __init__(self, procs: list[FakeProc]) -> None:
        super().__init__(procs)
        self.listings = 0

    async def list_all(self) -> list[ProcInfo]:
        self.listings += 1
        return await super().list_all()


def states_at_first_signal(table: FakeProcessTable, store: LeaseStore,
                           leases: list[LeaseRecord]) -> dict[str, LeaseState]:
    """Filled, at the table's first signal, with each lease's state as then on disk."""
    states: dict[str, LeaseState] = {}
    real_signal = table.signal

    async def signal_checking(pid: int, start_time: int, sig: int) -> bool:
        if not states:
            for lease in leases:
                rec = await store.get(lease.lease_id)
                assert rec is not None
                states[lease.lease_id] = rec.state
        return await real_signal(pid, start_time, sig)
    table.signal = signal_checking  # type: ignore[method-assign]
    return states


@pytest.fixture
async def store(tmp_path: Path):
    s = await LeaseStore.open(tmp_path / "leases.db")
    yield s
    await s.close()


async def test_one_listing_closing_first_states_batched(store: LeaseStore) -> None:
    """Lease 0 and 1 reap cleanly, lease 2's root is gone (lost), lease 3's live command
    does not match (reopened, never signalled), lease 4's adapter ignores SIGTERM and
    is SIGKILLed after a fresh re-verification."""
    procs: list[FakeProc] = []
    leases: list[LeaseRecord] = []
    for i in range(5):
        lease, wrapper, adapter = _lease(i)
        leases.append(lease)
        if i == 2:
            continue  # whole tree gone
        if i == 3:
            wrapper.cmdline = (*wrapper.cmdline, "--extra")
        if i == 4:
            adapter.ignores_term = True
        procs += [wrapper, adapter]
    for lease in leases:
        await store.insert(lease)
    table = CountingTable(procs)
    states_before = states_at_first_signal(table, store, leases)

    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=3000,
                    sleep=clock.sleep, clock=clock.now, wall_ms=lambda: 777)
    results = await reaper.reap_all()

    # Every lease was closing on disk before the first signal (SPEC §13 ordering).
    assert states_before == {lease.lease_id: LeaseState.CLOSING for lease in leases}
    # One listing for the whole pass, plus one fresh listing for lease 4's re-verification.
    assert table.listings == 2
    assert [r.lease.lease_id for r in results if r.lease] == [f"lease-{i}" for i in range(5)]
    states = {r.lease.lease_id: r.lease.state for r in results if r.lease}
    assert states == {"lease-0": LeaseState.CLOSED, "lease-1": LeaseState.CLOSED,
                      "lease-2": LeaseState.LOST, "lease-3": LeaseState.OPEN,
                      "lease-4": LeaseState.CLOSED}
    for lease_id, state in states.items():
        rec = await store.get(lease_id)
        assert rec is not None and rec.state == state
        assert rec.ended_at == (777 if state in (LeaseState.CLOSED, LeaseState.LOST) else 0)
    assert results[3].unverified_reason == REASON_COMMAND
    # Lease 3's tree was never signalled; lease 4's adapter got TERM then KILL.
    signalled = table.signalled_pids()
    assert not signalled & {5030, 5031}
    assert [(pid, sig) for pid, _, sig in table.signals if pid == 5041] == [
        (5041, signal.SIGTERM), (5041, signal.SIGKILL)]
    assert set(table.procs) == {5030, 5031}
    assert results[4].terminated_pids == (5040, 5041) and results[4].surviving_pids == ()


async def test_warm_leases_are_reaped_like_open_ones(store: LeaseStore) -> None:
    """A warm pool's leases of an earlier run (one waiting, one taken) are closing on
    disk before the first signal and end closed, their trees signalled like any."""
    waiting, ww, wa = _lease(0)
    taken, tw, ta = _lease(1)
    await store.insert(replace(waiting, state=LeaseState.WARM, session_key="agent:a:warm"))
    await store.insert(taken)
    table = CountingTable([ww, wa, tw, ta])
    seen = states_at_first_signal(table, store, [waiting, taken])
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=3000,
                    sleep=clock.sleep, clock=clock.now, wall_ms=lambda: 5)
    results = await reaper.reap_all()
    assert seen == {waiting.lease_id: LeaseState.CLOSING, taken.lease_id: LeaseState.CLOSING}
    assert [r.lease.state for r in results if r.lease] == [LeaseState.CLOSED, LeaseState.CLOSED]
    assert table.signalled_pids() == {5000, 5001, 5010, 5011} and not table.procs


async def test_survivor_not_reverified_is_not_killed(store: LeaseStore) -> None:
    """A survivor whose tree no longer verifies at the fresh re-listing gets no SIGKILL
    and its lease reopens — the other lease of the same pass still closes."""
    a, aw, aa = _lease(0)
    b, bw, ba = _lease(1)
    ba.ignores_term = True
    bw.ignores_term = True
    table = CountingTable([aw, aa, bw, ba])
    for lease in (a, b):
        await store.insert(lease)
    clock = VirtualClock()

    def swap_command(_: float) -> None:
        # During the grace period lease 1's root turns into something else.
        proc = table.procs.get(bw.pid)
        if proc is not None:
            proc.cmdline = ("/bin/sh",)
    clock.on_sleep = swap_command
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=200,
                    sleep=clock.sleep, clock=clock.now, wall_ms=lambda: 5)
    results = await reaper.reap_all()
    assert [r.lease.state for r in results if r.lease] == [LeaseState.CLOSED, LeaseState.OPEN]
    assert "re-verification failed" in results[1].unverified_reason
    assert all(sig == signal.SIGTERM for _, _, sig in table.signals)
    assert {bw.pid, ba.pid} <= set(table.procs)


async def test_transition_many_is_compare_and_set(store: LeaseStore) -> None:
    """Each move is its own compare-and-set; one stale move does not block the others."""
    a, _, _ = _lease(0)
    b, _, _ = _lease(1)
    await store.insert(a)
    await store.insert(b)
    stale_b = await store.transition(b, LeaseState.CLOSING)
    assert stale_b is not None
    out = await store.transition_many([(a, LeaseState.CLOSING), (b, LeaseState.CLOSING)])
    assert out[0] is not None and out[0].state == LeaseState.CLOSING and out[1] is None
    ended = await store.transition_many(
        [(out[0], LeaseState.CLOSED), (stale_b, LeaseState.LOST)], now_ms=42)
    assert [(r.state, r.ended_at) for r in ended if r] == [
        (LeaseState.CLOSED, 42), (LeaseState.LOST, 42)]
    assert await store.transition_many([]) == []


async def test_only_and_skip_bound_the_pass(store: LeaseStore) -> None:
    """``only`` limits a pass to the leases the caller listed (ReapOrphans never reaps
    a lease spawned after its listing); ``skip`` leaves live ones alone."""
    trees = [_lease(i) for i in range(3)]
    table = CountingTable([p for _, w, a in trees for p in (w, a)])
    for lease, _, _ in trees:
        await store.insert(lease)
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=100,
                    sleep=clock.sleep, clock=clock.now)
    results = await reaper.reap_all(only={"lease-0", "lease-1"}, skip={"lease-1"})
    assert [r.lease.lease_id for r in results if r.lease] == ["lease-0"]
    states = [(await store.get(f"lease-{i}")) for i in range(3)]
    assert [s.state for s in states if s] == [LeaseState.CLOSED, LeaseState.OPEN,
                                              LeaseState.OPEN]
    assert table.signalled_pids() == {5000, 5001}
    assert await reaper.reap_all(only=set()) == []
