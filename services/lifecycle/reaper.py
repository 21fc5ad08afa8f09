"""Reaping a lease's process tree: closeSession and startup reaping (SPEC §13).

closing → verify → SIGTERM children first → grace → re-verify → SIGKILL the
survivors → closed (lost if the root was already gone). When the evidence is
unavailable the lease goes back to open and nothing is signalled; when the live
tree does not belong to the lease nothing is signalled either.

A signal always names a ``(pid, start_time)`` identity taken from a
verification, so a PID recycled meanwhile is never hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from services.common.logs import get_logger
from services.lifecycle.leases import ENDED_STATES, LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.legacy import LegacyRecord, verify_legacy
from services.lifecycle.proctable import ProcessTable, ProcessTableError, ProcInfo
from services.lifecycle.snapshot import ProcSnapshot, TreeProc, children_first
from services.lifecycle.verify import (
    REASON_BIRTH,
    REASON_OTHER_INSTANCE,
    REASON_ROOT_GONE,
    Owner,
    Verification,
    verify_owned_tree,
)

log = get_logger("lifecycle.reaper")

POLL_SECS = 0.05
#: Transient "cannot tell right now" answers are retried this often before failing closed.
VERIFY_ATTEMPTS = 5
#: How long to wait for SIGKILLed processes to disappear before reporting survivors.
KILL_WAIT_SECS = 2.0


@dataclass(frozen=True)
class CloseResult:
    """What a close or reap did."""

    lease: LeaseRecord | None
    terminated_pids: tuple[int, ...] = ()
    surviving_pids: tuple[int, ...] = ()
    #: Empty on success; why nothing (more) was signalled otherwise.
    unverified_reason: str = ""


def now_ms() -> int:
    """Wall clock in milliseconds since the epoch."""
    return int(time.time() * 1000)


class Reaper:
    """Verifies and reaps lease trees for one gateway instance."""

    def __init__(
        self,
        store: LeaseStore,
        table: ProcessTable,
        owner: Owner,
        *,
        term_grace_ms: int,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.table = table
        self.owner = owner
        self.term_grace_ms = term_grace_ms
        self._sleep = sleep
        self._clock = clock
        self._wall_ms = wall_ms

    async def verify(
        self, lease: LeaseRecord, snapshot: ProcSnapshot | None = None
    ) -> Verification:
        """Verify ``lease`` against the live table (read-only).

        A process table that raises unexpectedly proves nothing: the answer is
        "evidence unavailable" (fail closed, the lease stays open for a retry),
        never an exception that would leave the lease stuck in closing.
        """
        try:
            return await verify_owned_tree(lease, self.table, self.owner, snapshot)
        except Exception as exc:  # any table failure = cannot tell
            why = f"{type(exc).__name__}: {exc}"
            log.warning("verify_failed", lease_id=lease.lease_id, why=why)
            return Verification(False, f"verification failed: {why}", evidence_unavailable=True)

    async def _record_verification(
        self, lease: LeaseRecord, verification: Verification, reason: str
    ) -> LeaseRecord:
        """Store a root recovered for a pending lease, log the verdict; the lease as now stored."""
        if verification.recovered_root is not None:
            root = verification.recovered_root
            updated = await self.store.update(
                lease.lease_id, root_pid=root.pid, root_start_time=root.start_time
            )
            lease = updated or lease
        log.info(
            "lease_close",
            lease_id=lease.lease_id,
            reason=reason,
            verified=verification.verified,
            root_gone=verification.root_gone,
            why=verification.reason,
            pids=[p.info.pid for p in verification.processes],
        )
        return lease

    async def _verify_retrying(self, lease: LeaseRecord) -> Verification:
        """Verify, retrying briefly while the evidence is unavailable (e.g. a root mid-exit)."""
        result = await self.verify(lease)
        for _ in range(VERIFY_ATTEMPTS - 1):
            if not result.evidence_unavailable:
                break
            await self._sleep(POLL_SECS)
            result = await self.verify(lease)
        return result

    # ------------------------------------------------------------------ close

    async def close(self, lease_id: str, reason: str = "close") -> CloseResult:
        """Close one lease (serialized with every other transition of it)."""
        async with self.store.lock(lease_id):
            lease = await self.store.get(lease_id)
            if lease is None:
                return CloseResult(None, unverified_reason="unknown lease")
            return await self._close_locked(lease, reason)

    async def _close_locked(self, lease: LeaseRecord, reason: str) -> CloseResult:
        if lease.state in ENDED_STATES:
            return CloseResult(lease)
        if lease.gateway_instance_id != self.owner.instance_id:
            # Never touch another gateway's lease, not even its state.
            return CloseResult(lease, unverified_reason=REASON_OTHER_INSTANCE)
        if lease.state == LeaseState.OPEN:
            moved = await self.store.transition(lease, LeaseState.CLOSING)
            if moved is None:
                fresh = await self.store.get(lease.lease_id)
                return CloseResult(fresh, unverified_reason="lease changed state concurrently")
            lease = moved
        verification = await self._verify_retrying(lease)
        lease = await self._record_verification(lease, verification, reason)
        if not verification.verified:
            state, why = _unverified_outcome(verification)
            if state == LeaseState.LOST:
                return CloseResult(await self._end(lease, state), unverified_reason=why)
            return CloseResult(await self._reopen(lease), unverified_reason=why)

        stopped = await self._terminate(lease, verification)
        if stopped.unverified_reason:
            return replace(stopped, lease=await self._reopen(lease))
        state = LeaseState.LOST if verification.root_gone else LeaseState.CLOSED
        return replace(stopped, lease=await self._end(lease, state))

    async def _terminate(self, lease: LeaseRecord, verification: Verification) -> CloseResult:
        """SIGTERM the verified tree, grace, re-verify, SIGKILL survivors (lease state untouched).

        The result carries ``lease`` as given; ``unverified_reason`` is set when the
        re-verification before SIGKILL refused (the survivors were left alone).
        """
        snapshot = list(verification.processes)
        await self._signal_all(snapshot, signal.SIGTERM)
        survivors = await self._wait_gone(snapshot, self.term_grace_ms / 1000.0)
        killed: list[TreeProc] = []
        if survivors:
            escalated, again = await self._kill_survivors(lease, survivors)
            if escalated is None:
                return _refused(lease, snapshot, survivors, again)
            killed = escalated
        everything = {p.info.identity: p for p in [*snapshot, *killed]}
        left = await self._wait_gone(list(everything.values()), KILL_WAIT_SECS if killed else 0.0)
        return CloseResult(
            lease,
            terminated_pids=_pids(p for p in everything.values() if p not in left),
            surviving_pids=_pids(left),
        )

    async def stop_stray(self, lease: LeaseRecord, reason: str) -> CloseResult:
        """Stop the tree of a spawn whose lease ended while the spawn was in flight.

        ``lease`` is the spawn's own view of the lease (root PID, birth identity,
        group as the spawn observed them), not the stored, already ended record,
        which is left as it is. The tree is verified against that view and reaped
        with the same steps as :meth:`close`; anything unverifiable is left alone
        and reported in ``unverified_reason``. The caller holds the lease's lock.
        """
        verification = await self._verify_retrying(lease)
        log.info(
            "lease_stray_stop",
            lease_id=lease.lease_id,
            reason=reason,
            verified=verification.verified,
            why=verification.reason,
            pids=[p.info.pid for p in verification.processes],
        )
        if not verification.verified:
            return CloseResult(lease, unverified_reason=verification.reason or REASON_ROOT_GONE)
        return await self._terminate(lease, verification)

    async def _signal_all(self, procs: Iterable[TreeProc], sig: int) -> None:
        """Signal each verified identity, in the given (children-first) order.

        A failed signal is an outcome, not an error: it is logged and the process
        is left to the liveness checks that follow, which report it as a survivor.
        Nothing a process table raises here may escape, or a close would leave its
        lease stuck in closing and a startup reap would stop the service starting.
        """
        for proc in procs:
            try:
                await self.table.signal(proc.info.pid, proc.info.start_time, sig)
            except Exception as exc:  # any table failure = not delivered
                log.warning(
                    "signal_failed",
                    pid=proc.info.pid,
                    sig=int(sig),
                    why=f"{type(exc).__name__}: {exc}",
                )

    async def _kill_survivors(
        self, lease: LeaseRecord, survivors: Sequence[TreeProc]
    ) -> tuple[list[TreeProc] | None, Verification]:
        """Re-verify right before SIGKILL, then SIGKILL the survivors plus whatever the
        re-verification found in the tree, children first.

        ``(None, again)`` when the re-verification cannot prove the tree is still
        the lease's: nothing is signalled. Otherwise ``(killed, again)``.
        """
        again = await self._verify_retrying(lease)
        if not _still_ours(again):
            return None, again
        allowed = {p.info.identity: p for p in survivors}
        for proc in again.processes:
            allowed.setdefault(proc.info.identity, proc)
        killed = list(children_first(list(allowed.values())))
        await self._signal_all(killed, signal.SIGKILL)
        return killed, again

    async def _end(self, lease: LeaseRecord, state: LeaseState) -> LeaseRecord | None:
        ended = await self.store.transition(lease, state, now_ms=self._wall_ms())
        return ended or await self.store.get(lease.lease_id)

    async def _reopen(self, lease: LeaseRecord) -> LeaseRecord | None:
        reopened = await self.store.transition(lease, LeaseState.OPEN)
        return reopened or await self.store.get(lease.lease_id)

    async def _alive(self, info: ProcInfo) -> bool:
        try:
            live = await self.table.get(info.pid)
        except ProcessTableError:
            return True  # unknown counts as alive: never report a kill we cannot see
        return live is not None and live.start_time == info.start_time and not live.zombie

    async def _wait_gone(self, procs: Sequence[TreeProc], within: float) -> list[TreeProc]:
        """Poll until every process is gone or ``within`` passed; the survivors."""
        deadline = self._clock() + within
        while True:
            left = [p for p in procs if await self._alive(p.info)]
            if not left or self._clock() >= deadline:
                return left
            await self._sleep(POLL_SECS)

    # ------------------------------------------------------------------ startup

    async def reap_all(
        self,
        *,
        skip: Iterable[str] = (),
        only: Iterable[str] | None = None,
        reason: str = "startup",
    ) -> list[CloseResult]:
        """Close every open/closing lease of this instance except ``skip`` (and, when
        ``only`` is given, none outside it), in one pass.

        The same steps as :meth:`close` for each lease, batched where that keeps the
        SPEC §13 ordering: every open lease is marked closing in one durable
        transaction before any signal; one process listing taken after that commit
        verifies every lease; every verified tree gets SIGTERM, then one grace period
        runs for all; a lease with survivors is re-verified against a fresh listing of
        its own right before its SIGKILL; the final states are written in one
        transaction.
        """
        skipped = set(skip)
        listed = await self.store.list(
            states=(LeaseState.OPEN, LeaseState.CLOSING), instance_id=self.owner.instance_id
        )
        ids_set = {lease.lease_id for lease in listed} - skipped
        if only is not None:
            ids_set &= set(only)
        ids = sorted(ids_set)
        if not ids:
            return []
        async with contextlib.AsyncExitStack() as stack:
            for lease_id in ids:  # sorted: two passes never wait on each other crosswise
                await stack.enter_async_context(self.store.lock(lease_id))
            # Re-read under the locks: a concurrent close may have moved some meanwhile.
            wanted = set(ids)
            leases = [
                lease
                for lease in await self.store.list(
                    states=(LeaseState.OPEN, LeaseState.CLOSING),
                    instance_id=self.owner.instance_id,
                )
                if lease.lease_id in wanted
            ]
            return await self._reap_locked(leases, reason)

    async def _reap_locked(self, leases: list[LeaseRecord], reason: str) -> list[CloseResult]:
        results: dict[str, CloseResult] = {}
        # 1. closing, durable, before any signal (SPEC §13).
        opens = [lease for lease in leases if lease.state == LeaseState.OPEN]
        moved = await self.store.transition_many([(lease, LeaseState.CLOSING) for lease in opens])
        current: dict[str, LeaseRecord] = {lease.lease_id: lease for lease in leases}
        for lease, now in zip(opens, moved, strict=True):
            if now is None:
                fresh = await self.store.get(lease.lease_id)
                results[lease.lease_id] = CloseResult(
                    fresh, unverified_reason="lease changed state concurrently"
                )
                del current[lease.lease_id]
            else:
                current[lease.lease_id] = now
        # 2. one listing, taken after the commit, verifies every lease.
        try:
            snapshot: ProcSnapshot | None = ProcSnapshot(await self.table.list_all())
        except ProcessTableError:
            snapshot = None  # each lease lists (and retries) on its own below
        except Exception as exc:  # unexpected: the same, but worth a log line
            log.warning("listing_failed", why=f"{type(exc).__name__}: {exc}")
            snapshot = None
        endings: list[tuple[LeaseRecord, LeaseState]] = []
        reaping: list[tuple[LeaseRecord, Verification]] = []
        for lease in current.values():
            verification = await self.verify(lease, snapshot)
            if verification.evidence_unavailable:
                verification = await self._verify_retrying(lease)
            lease = await self._record_verification(lease, verification, reason)
            if verification.verified:
                reaping.append((lease, verification))
                continue
            state, why = _unverified_outcome(verification)
            results[lease.lease_id] = CloseResult(lease, unverified_reason=why)
            endings.append((lease, state))
        # 3. SIGTERM every verified tree at once, then one grace period for all.
        for _, verification in reaping:
            await self._signal_all(verification.processes, signal.SIGTERM)
        everyone = [p for _, v in reaping for p in v.processes]
        survivors = {p.info.identity for p in await self._wait_gone(
            everyone, self.term_grace_ms / 1000.0)}
        # 4. per lease: re-verify right before its SIGKILL, exactly as in close().
        finals: list[tuple[LeaseRecord, Verification, list[TreeProc], list[TreeProc]]] = []
        for lease, verification in reaping:
            snap = list(verification.processes)
            left = [p for p in snap if p.info.identity in survivors]
            killed: list[TreeProc] = []
            if left:
                escalated, again = await self._kill_survivors(lease, left)
                if escalated is None:
                    results[lease.lease_id] = _refused(lease, snap, left, again)
                    endings.append((lease, LeaseState.OPEN))
                    continue
                killed = escalated
            finals.append((lease, verification, snap, killed))
        # 5. wait for the killed ones (all together), then the final states in one commit.
        tracked = {p.info.identity: p for _, _, snap, killed in finals for p in [*snap, *killed]}
        any_killed = any(killed for *_, killed in finals)
        gone_left = {p.info.identity for p in await self._wait_gone(
            list(tracked.values()), KILL_WAIT_SECS if any_killed else 0.0)}
        for lease, verification, snap, killed in finals:
            everything = {p.info.identity: p for p in [*snap, *killed]}
            results[lease.lease_id] = CloseResult(
                lease,
                terminated_pids=_pids(
                    p for i, p in everything.items() if i not in gone_left),
                surviving_pids=_pids(p for i, p in everything.items() if i in gone_left),
            )
            endings.append(
                (lease, LeaseState.LOST if verification.root_gone else LeaseState.CLOSED))
        written = await self.store.transition_many(endings, now_ms=self._wall_ms())
        for (lease, _), rec in zip(endings, written, strict=True):
            rec = rec or await self.store.get(lease.lease_id)
            results[lease.lease_id] = replace(results[lease.lease_id], lease=rec)
        return [results[lease.lease_id] for lease in leases if lease.lease_id in results]

    # ------------------------------------------------------------------ legacy

    async def close_legacy(self, record: LegacyRecord) -> CloseResult:
        """Reap a lease-less legacy record, only if it verifies; else leave it alone."""
        verification = await verify_legacy(record, self.table)
        if not verification.verified:
            return CloseResult(None, unverified_reason=verification.reason)
        snapshot = list(verification.processes)
        await self._signal_all(snapshot, signal.SIGTERM)
        survivors = await self._wait_gone(snapshot, self.term_grace_ms / 1000.0)
        if survivors:
            again = await verify_legacy(record, self.table)
            if not _still_ours(again):
                return _refused(None, snapshot, survivors, again)
            await self._signal_all(survivors, signal.SIGKILL)
        left = await self._wait_gone(snapshot, KILL_WAIT_SECS if survivors else 0.0)
        return CloseResult(
            None,
            terminated_pids=_pids(p for p in snapshot if p not in left),
            surviving_pids=_pids(left),
        )


def _pids(procs: Iterable[TreeProc]) -> tuple[int, ...]:
    return tuple(sorted(p.info.pid for p in procs))


def _still_ours(again: Verification) -> bool:
    """A re-verification that allows SIGKILL: the tree verified, or its root is provably gone."""
    return not again.evidence_unavailable and (again.verified or again.root_gone)


def _unverified_outcome(verification: Verification) -> tuple[LeaseState, str]:
    """Where an unverified lease goes, and the reason to report.

    A provably gone root ends the lease as lost (the reason is reported only for
    a reused PID); anything else reopens it for a later retry, nothing signalled.
    """
    if verification.root_gone:
        return LeaseState.LOST, verification.reason if verification.reason == REASON_BIRTH else ""
    return LeaseState.OPEN, verification.reason


def _refused(
    lease: LeaseRecord | None,
    snapshot: Sequence[TreeProc],
    survivors: Sequence[TreeProc],
    again: Verification,
) -> CloseResult:
    """The result when the re-verification before SIGKILL failed: survivors left alone."""
    return CloseResult(
        lease,
        terminated_pids=_pids(p for p in snapshot if p not in survivors),
        surviving_pids=_pids(survivors),
        unverified_reason=f"re-verification failed: {again.reason}",
    )
