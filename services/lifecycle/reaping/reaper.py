"""Reaping a lease's process tree: closeSession and startup reaping (SPEC §13).

closing → verify → SIGTERM children first → grace → re-verify → SIGKILL the
survivors → closed (lost if the root was already gone). When the evidence is
unavailable the lease goes back to open and nothing is signalled; when the live
tree does not belong to the lease nothing is signalled either.

A signal always names a ``(pid, start_time)`` identity taken from a
verification, so a PID recycled meanwhile is never hit.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterable
from dataclasses import replace

from services.common.logs import get_logger
from services.lifecycle.leases.store import (
    ENDED_STATES,
    HELD_STATES,
    LIVE_STATES,
    LeaseRecord,
    LeaseState,
)
from services.lifecycle.processes.snapshot import TreeProc
from services.lifecycle.processes.verify import (
    REASON_OTHER_INSTANCE,
    REASON_ROOT_GONE,
    Verification,
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
from services.lifecycle.reaping.steps import (
    KILL_WAIT_SECS,
    POLL_SECS,
    VERIFY_ATTEMPTS,
    ReapSteps,
    now_ms,
)

log = get_logger("lifecycle.reaper")

__all__ = ["KILL_WAIT_SECS", "POLL_SECS", "VERIFY_ATTEMPTS", "CloseResult", "Reaper", "now_ms"]


class Reaper(ReapSteps):
    """Verifies and reaps lease trees for one gateway instance."""

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

    async def _end(self, lease: LeaseRecord, state: LeaseState) -> LeaseRecord | None:
        ended = await self.store.transition(lease, state, now_ms=self.wall_ms())
        return ended or await self.store.get(lease.lease_id)

    async def _reopen(self, lease: LeaseRecord) -> LeaseRecord | None:
        reopened = await self.store.transition(lease, LeaseState.OPEN)
        return reopened or await self.store.get(lease.lease_id)

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
