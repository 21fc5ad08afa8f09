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
from dataclasses import replace

from services.common.logs import get_logger
from services.lifecycle.leases.store import (
    ENDED_STATES,
    HELD_STATES,
    LIVE_STATES,
    LeaseRecord,
    LeaseState,
    LeaseStore,
)
from services.lifecycle.processes.snapshot import Identity, ProcSnapshot, TreeProc, children_first
from services.lifecycle.processes.table import ProcessTable, ProcessTableError, ProcInfo
from services.lifecycle.processes.verify import (
    REASON_OTHER_INSTANCE,
    REASON_ROOT_GONE,
    Owner,
    Verification,
    verify_owned_tree,
)
from services.lifecycle.reaping.batch import ReapPass
from services.lifecycle.reaping.legacy import (
    LegacyCloseResult,
    LegacyRecord,
    LegacyState,
    legacy_result,
    unverified_legacy,
    verify_legacy,
)
from services.lifecycle.reaping.results import (
    CHANGED_CONCURRENTLY,
    CloseResult,
    refused,
    still_ours,
    tally,
    unverified_outcome,
)

log = get_logger("lifecycle.reaper")

POLL_SECS = 0.05
#: Transient "cannot tell right now" answers are retried this often before failing closed.
VERIFY_ATTEMPTS = 5
#: How long to wait for SIGKILLed processes to disappear before reporting survivors.
KILL_WAIT_SECS = 2.0

__all__ = ["KILL_WAIT_SECS", "POLL_SECS", "VERIFY_ATTEMPTS", "CloseResult", "Reaper", "now_ms"]


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
        #: The wall clock (ms since the epoch) that stamps ended leases.
        self.wall_ms = wall_ms

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

    async def record_verification(
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

    async def verify_retrying(self, lease: LeaseRecord) -> Verification:
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
        if lease.state in HELD_STATES:
            moved = await self.store.transition(lease, LeaseState.CLOSING)
            if moved is None:
                fresh = await self.store.get(lease.lease_id)
                return CloseResult(fresh, unverified_reason=CHANGED_CONCURRENTLY)
            lease = moved
        verification = await self.verify_retrying(lease)
        lease = await self.record_verification(lease, verification, reason)
        if not verification.verified:
            state, why = unverified_outcome(verification)
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
        await self.signal_all(snapshot, signal.SIGTERM)
        survivors = await self.wait_gone(snapshot, self.term_grace_ms / 1000.0)
        killed: list[TreeProc] = []
        if survivors:
            escalated, again = await self.kill_survivors(lease, survivors)
            if escalated is None:
                return refused(lease, snapshot, survivors, again)
            killed = escalated
        everything = {p.info.identity: p for p in [*snapshot, *killed]}
        left = await self.wait_killed(everything.values(), killed=bool(killed))
        return tally(lease, everything.values(), left)

    async def stop_stray(self, lease: LeaseRecord, reason: str) -> CloseResult:
        """Stop the tree of a spawn whose lease ended while the spawn was in flight.

        ``lease`` is the spawn's own view of the lease (root PID, birth identity,
        group as the spawn observed them), not the stored, already ended record,
        which is left as it is. The tree is verified against that view and reaped
        with the same steps as :meth:`close`; anything unverifiable is left alone
        and reported in ``unverified_reason``. The caller holds the lease's lock.
        """
        verification = await self.verify_retrying(lease)
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

    async def signal_all(self, procs: Iterable[TreeProc], sig: int) -> None:
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

    async def kill_survivors(
        self, lease: LeaseRecord, survivors: Sequence[TreeProc]
    ) -> tuple[list[TreeProc] | None, Verification]:
        """Re-verify right before SIGKILL, then SIGKILL the survivors plus whatever the
        re-verification found in the tree, children first.

        ``(None, again)`` when the re-verification cannot prove the tree is still
        the lease's: nothing is signalled. Otherwise ``(killed, again)``.
        """
        again = await self.verify_retrying(lease)
        if not still_ours(again):
            return None, again
        allowed = {p.info.identity: p for p in survivors}
        for proc in again.processes:
            allowed.setdefault(proc.info.identity, proc)
        killed = list(children_first(list(allowed.values())))
        await self.signal_all(killed, signal.SIGKILL)
        return killed, again

    async def _end(self, lease: LeaseRecord, state: LeaseState) -> LeaseRecord | None:
        ended = await self.store.transition(lease, state, now_ms=self.wall_ms())
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

    async def wait_gone(self, procs: Sequence[TreeProc], within: float) -> list[TreeProc]:
        """Poll until every process is gone or ``within`` passed; the survivors."""
        deadline = self._clock() + within
        while True:
            left = [p for p in procs if await self._alive(p.info)]
            if not left or self._clock() >= deadline:
                return left
            await self._sleep(POLL_SECS)

    async def wait_killed(self, procs: Iterable[TreeProc], *, killed: bool) -> set[Identity]:
        """The identities of ``procs`` still alive once the SIGKILLed ones had
        :data:`KILL_WAIT_SECS` to go (one look, no wait, when nothing was killed)."""
        left = await self.wait_gone(list(procs), KILL_WAIT_SECS if killed else 0.0)
        return {p.info.identity for p in left}

    # ------------------------------------------------------------------ startup

    async def reap_all(
        self,
        *,
        skip: Iterable[str] = (),
        only: Iterable[str] | None = None,
        reason: str = "startup",
    ) -> list[CloseResult]:
        """Close every live (open, warm, closing) lease of this instance except ``skip`` (and, when
        ``only`` is given, none outside it), in one pass.

        The same steps as :meth:`close` for each lease, batched where that keeps the
        SPEC §13 ordering (:class:`~services.lifecycle.reaping.batch.ReapPass` says how).
        The leases are locked in sorted order and re-read under the locks first.
        """
        skipped = set(skip)
        listed = await self.store.list(
            states=LIVE_STATES, instance_id=self.owner.instance_id
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
                    states=LIVE_STATES,
                    instance_id=self.owner.instance_id,
                )
                if lease.lease_id in wanted
            ]
            return await ReapPass(self, reason).run(leases)

    # ------------------------------------------------------------------ legacy

    async def close_legacy(self, record: LegacyRecord, *, protect: int = 0) -> LegacyCloseResult:
        """Reap a lease-less legacy record, only if it verifies; else leave it alone.

        ``protect``: a PID whose tree is never taken (the calling service's own). The
        result's ``state`` is where the record goes: closed (reaped), lost (its process
        was gone already, nothing signalled) or left (not provably the record's, nothing
        signalled; or the survivors of a refused re-verification, left alone).
        """
        async def verify() -> Verification:
            return await verify_legacy(record, self.table, protect=protect,
                                       own_wrapper_root=self.owner.wrapper_root)

        verification = await verify()
        if not verification.verified:
            return unverified_legacy(verification)
        snapshot = list(verification.processes)
        await self.signal_all(snapshot, signal.SIGTERM)
        survivors = await self.wait_gone(snapshot, self.term_grace_ms / 1000.0)
        if survivors:
            again = await verify()
            if not still_ours(again):
                return legacy_result(refused(None, snapshot, survivors, again), LegacyState.LEFT)
            await self.signal_all(survivors, signal.SIGKILL)
        left = await self.wait_killed(snapshot, killed=bool(survivors))
        return legacy_result(tally(None, snapshot, left), LegacyState.CLOSED)
