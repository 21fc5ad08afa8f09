"""The named steps of a batched reap pass and the outcome rules, one contract each (SPEC §13).

test_reap_pass.py runs whole passes; here each step of ReapPass and each rule
of services/lifecycle/reaping/results is held to its own promise.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from services.lifecycle.leases.store import LeaseState, LeaseStore
from services.lifecycle.processes.snapshot import TreeProc
from services.lifecycle.processes.table import FakeProcessTable, ProcessTableError, ProcInfo
from services.lifecycle.processes.verify import (
    REASON_BIRTH,
    REASON_COMMAND,
    REASON_ROOT_GONE,
    REASON_UNREADABLE,
    Owner,
    Verification,
)
from services.lifecycle.reaping.batch import ReapPass
from services.lifecycle.reaping.reaper import Reaper
from services.lifecycle.reaping.results import (
    CHANGED_CONCURRENTLY,
    refused,
    still_ours,
    tally,
    unverified_outcome,
)
from tests.lifecycle.test_reap_pass import _lease
from tests.lifecycle.test_simulator import INSTANCE, ROOT, VirtualClock


@pytest.fixture
async def store(tmp_path: Path):
    s = await LeaseStore.open(tmp_path / "leases.db")
    yield s
    await s.close()


def make_pass(store: LeaseStore, table: FakeProcessTable, grace_ms: int = 100) -> ReapPass:
    clock = VirtualClock()
    reaper = Reaper(store, table, Owner(INSTANCE, ROOT), term_grace_ms=grace_ms,
                    sleep=clock.sleep, clock=clock.now, wall_ms=lambda: 9)
    return ReapPass(reaper, "test")


def tp(pid: int, start: int = 1, depth: int = 0) -> TreeProc:
    return TreeProc(ProcInfo(pid, 1, pid, start), depth)


# ---------------------------------------------------------------------- mark_closing


async def test_mark_closing_commits_before_anything_else_and_drops_a_lost_race(
    store: LeaseStore,
) -> None:
    (a, _, _), (b, _, _), (c, _, _) = _lease(0), _lease(1), _lease(2)
    for lease in (a, b, c):
        await store.insert(lease)
    ended = await store.transition(b, LeaseState.CLOSED, now_ms=3)  # a close won b's race
    assert ended is not None
    already = await store.transition(c, LeaseState.CLOSING)
    assert already is not None
    table = FakeProcessTable([])
    reap = make_pass(store, table)

    closing = await reap.mark_closing([a, b, already])  # b is the stale open record

    assert [(lease.lease_id, lease.state) for lease in closing] == [
        ("lease-0", LeaseState.CLOSING), ("lease-2", LeaseState.CLOSING)]
    stored = await store.get("lease-0")
    assert stored is not None and stored.state == LeaseState.CLOSING  # durable, not just returned
    lost = reap.ledger.results["lease-1"]
    assert lost.unverified_reason == CHANGED_CONCURRENTLY
    assert lost.lease is not None and lost.lease.state == LeaseState.CLOSED  # as stored now
    assert reap.ledger.endings == []  # the winner already wrote b's state
    assert table.signals == []


# ---------------------------------------------------------------------- shared_listing


class BrokenTable(FakeProcessTable):
    def __init__(self, error: Exception) -> None:
        super().__init__([])
        self.error = error

    async def list_all(self) -> list[ProcInfo]:
        raise self.error


@pytest.mark.parametrize("error", [ProcessTableError("gone"), RuntimeError("bug")])
async def test_shared_listing_is_none_when_the_table_fails(
    store: LeaseStore, error: Exception
) -> None:
    assert await make_pass(store, BrokenTable(error)).shared_listing() is None


async def test_shared_listing_indexes_the_table(store: LeaseStore) -> None:
    _, wrapper, adapter = _lease(0)
    snap = await make_pass(store, FakeProcessTable([wrapper, adapter])).shared_listing()
    assert snap is not None and set(snap.by_pid) == {wrapper.pid, adapter.pid}


# ---------------------------------------------------------------------- verify_each


async def test_verify_each_decides_the_unverified_and_signals_nothing(store: LeaseStore) -> None:
    (ok, ow, oa), (reused, rw, _), (bad, bw, ba) = _lease(0), _lease(1), _lease(2)
    rw.start_time += 1  # another birth on lease 1's root PID, and no straggler of it left
    bw.cmdline = (*bw.cmdline, "--extra")
    table = FakeProcessTable([ow, oa, rw, bw, ba])
    reap = make_pass(store, table)
    for lease in (ok, reused, bad):
        await store.insert(lease)

    verified = await reap.verify_each([ok, reused, bad], await reap.shared_listing())

    assert [(lease.lease_id, v.verified) for lease, v in verified] == [("lease-0", True)]
    assert [(lease.lease_id, state) for lease, state in reap.ledger.endings] == [
        ("lease-1", LeaseState.LOST), ("lease-2", LeaseState.OPEN)]
    assert reap.ledger.results["lease-1"].unverified_reason == REASON_BIRTH
    assert reap.ledger.results["lease-2"].unverified_reason == REASON_COMMAND
    assert table.signals == []


async def test_verify_each_retries_on_its_own_listing_when_the_shared_one_is_missing(
    store: LeaseStore,
) -> None:
    lease, wrapper, adapter = _lease(0)
    await store.insert(lease)
    reap = make_pass(store, FakeProcessTable([wrapper, adapter]))
    verified = await reap.verify_each([lease], None)
    assert [v.verified for _, v in verified] == [True]


# ---------------------------------------------------------------------- terminate_all / kill


async def test_terminate_all_sigterms_every_tree_children_first_then_waits_once(
    store: LeaseStore,
) -> None:
    (a, aw, aa), (b, bw, ba) = _lease(0), _lease(1)
    ba.ignores_term = True
    table = FakeProcessTable([aw, aa, bw, ba])
    reap = make_pass(store, table)
    verified = await reap.verify_each([a, b], await reap.shared_listing())

    survivors = await reap.terminate_all(verified)

    assert [(pid, sig) for pid, _, sig in table.signals] == [
        (aa.pid, signal.SIGTERM), (aw.pid, signal.SIGTERM),
        (ba.pid, signal.SIGTERM), (bw.pid, signal.SIGTERM)]
    assert survivors == {(ba.pid, ba.start_time)}


async def test_kill_survivors_each_leaves_a_tree_alone_when_it_no_longer_verifies(
    store: LeaseStore,
) -> None:
    (a, aw, aa), (b, bw, ba) = _lease(0), _lease(1)
    aa.ignores_term = ba.ignores_term = aw.ignores_term = bw.ignores_term = True
    table = FakeProcessTable([aw, aa, bw, ba])
    reap = make_pass(store, table)
    verified = await reap.verify_each([a, b], await reap.shared_listing())
    survivors = await reap.terminate_all(verified)
    table.procs[bw.pid].cmdline = ("/bin/sh",)  # lease 1's root turned into something else

    doomed = await reap.kill_survivors_each(verified, survivors)

    assert [d.lease.lease_id for d in doomed] == ["lease-0"]
    assert {p.info.pid for p in doomed[0].killed} == {aw.pid, aa.pid}
    kills = [pid for pid, _, sig in table.signals if sig == signal.SIGKILL]
    assert kills == [aa.pid, aw.pid]  # children first, and none of lease 1's
    assert reap.ledger.endings == [(verified[1][0], LeaseState.OPEN)]
    assert reap.ledger.results["lease-1"].unverified_reason.startswith("re-verification failed")


async def test_a_whole_pass_ends_with_one_write_of_every_decided_state(store: LeaseStore) -> None:
    (a, aw, aa), (b, _, _) = _lease(0), _lease(1)  # lease 1's tree is gone
    for lease in (a, b):
        await store.insert(lease)
    reap = make_pass(store, FakeProcessTable([aw, aa]))
    results = await reap.run([a, b])
    assert [(r.lease.lease_id, r.lease.state, r.lease.ended_at) for r in results if r.lease] == [
        ("lease-0", LeaseState.CLOSED, 9), ("lease-1", LeaseState.LOST, 9)]
    assert results[0].terminated_pids == (aw.pid, aa.pid)


# ---------------------------------------------------------------------- results


@pytest.mark.parametrize(
    ("verification", "outcome"),
    [
        (Verification(False, REASON_ROOT_GONE, root_gone=True), (LeaseState.LOST, "")),
        (Verification(False, REASON_BIRTH, root_gone=True), (LeaseState.LOST, REASON_BIRTH)),
        (Verification(False, REASON_COMMAND), (LeaseState.OPEN, REASON_COMMAND)),
        (Verification(False, REASON_UNREADABLE, evidence_unavailable=True),
         (LeaseState.OPEN, REASON_UNREADABLE)),
    ],
)
def test_unverified_outcome_ends_only_a_provably_gone_root(
    verification: Verification, outcome: tuple[LeaseState, str]
) -> None:
    assert unverified_outcome(verification) == outcome


@pytest.mark.parametrize(
    ("again", "allowed"),
    [
        (Verification(True), True),
        (Verification(False, REASON_ROOT_GONE, root_gone=True), True),
        (Verification(False, REASON_COMMAND), False),
        (Verification(False, "x", root_gone=True, evidence_unavailable=True), False),
        (Verification(True, evidence_unavailable=True), False),
    ],
)
def test_still_ours_allows_sigkill_only_on_proof(again: Verification, allowed: bool) -> None:
    assert still_ours(again) is allowed


def test_tally_and_refused_split_terminated_from_surviving() -> None:
    procs = [tp(3, depth=1), tp(2), tp(1, depth=2)]
    result = tally(None, procs, {(2, 1)})
    assert result.terminated_pids == (1, 3) and result.surviving_pids == (2,)
    assert result.unverified_reason == ""
    no = refused(None, procs, [procs[1]], Verification(False, REASON_COMMAND))
    assert no.terminated_pids == (1, 3) and no.surviving_pids == (2,)
    assert no.unverified_reason == f"re-verification failed: {REASON_COMMAND}"
