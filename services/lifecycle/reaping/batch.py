"""One batched reap of many leases: startup reaping (SPEC §13).

The same steps as a single close, batched where that keeps the SPEC §13
ordering: every open lease is marked closing in one durable transaction before
any signal; one process listing taken after that commit verifies every lease;
every verified tree gets SIGTERM, then one grace period runs for all; a lease
with survivors is re-verified against a fresh listing of its own right before
its SIGKILL; the final states are written in one transaction.

The primitives (verification, identity-checked signals, liveness polling) are
:class:`~services.lifecycle.reaping.steps.ReapSteps`; this module orders them.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace

from services.common.logs import get_logger
from services.lifecycle.leases.store import HELD_STATES, LeaseRecord, LeaseState
from services.lifecycle.processes.snapshot import Identity, ProcSnapshot, TreeProc
from services.lifecycle.processes.table import ProcessTableError
from services.lifecycle.processes.verify import Verification
from services.lifecycle.reaping.results import (
    CHANGED_CONCURRENTLY,
    CloseResult,
    refused,
    tally,
    unverified_outcome,
)
from services.lifecycle.reaping.steps import ReapSteps

#: The reaper's logger: a pass is part of the reaper's story in the logs.
log = get_logger("lifecycle.reaper")


@dataclass(frozen=True)
class Doomed:
    """A verified lease whose tree was signalled: what was verified and what got SIGKILL."""

    lease: LeaseRecord
    verification: Verification
    killed: tuple[TreeProc, ...] = ()

    @property
    def tracked(self) -> dict[Identity, TreeProc]:
        """Every process of the lease this pass signalled, by identity."""
        return {p.info.identity: p for p in [*self.verification.processes, *self.killed]}


@dataclass
class Ledger:
    """What a pass has decided so far: each lease's result and the states to write.

    Endings are kept in decision order; they are written in one transaction.
    """

    results: dict[str, CloseResult] = field(default_factory=dict)
    endings: list[tuple[LeaseRecord, LeaseState]] = field(default_factory=list)

    def decide(self, lease: LeaseRecord, result: CloseResult, state: LeaseState | None) -> None:
        """Record ``result`` for ``lease``; ``state`` is where it goes (None: nowhere)."""
        self.results[lease.lease_id] = result
        if state is not None:
            self.endings.append((lease, state))


class ReapPass:
    """Reaps ``leases`` (their locks held by the caller) with one reaper's steps, in one pass."""

    def __init__(self, reaper: ReapSteps, reason: str) -> None:
        self.reaper = reaper
        self.reason = reason
        self.ledger = Ledger()

    async def run(self, leases: list[LeaseRecord]) -> list[CloseResult]:
        """The pass, step by step; one result per lease, in ``leases`` order."""
        closing = await self.mark_closing(leases)
        snapshot = await self.shared_listing()
        verified = await self.verify_each(closing, snapshot)
        survivors = await self.terminate_all(verified)
        doomed = await self.kill_survivors_each(verified, survivors)
        await self.settle(doomed)
        await self.write_endings()
        results = self.ledger.results
        return [results[lease.lease_id] for lease in leases if lease.lease_id in results]

    async def mark_closing(self, leases: list[LeaseRecord]) -> list[LeaseRecord]:
        """Step 1: every open (or warm) lease to closing in one durable commit, before any signal.

        A lease whose compare-and-set lost (another close moved it) drops out of
        the pass with that reason; the rest come back as now stored.
        """
        store = self.reaper.store
        opens = [lease for lease in leases if lease.state in HELD_STATES]
        moved = await store.transition_many([(lease, LeaseState.CLOSING) for lease in opens])
        current: dict[str, LeaseRecord] = {lease.lease_id: lease for lease in leases}
        for lease, now in zip(opens, moved, strict=True):
            if now is None:
                fresh = await store.get(lease.lease_id)
                lost_race = CloseResult(fresh, unverified_reason=CHANGED_CONCURRENTLY)
                self.ledger.decide(lease, lost_race, None)
                del current[lease.lease_id]
            else:
                current[lease.lease_id] = now
        return list(current.values())

    async def shared_listing(self) -> ProcSnapshot | None:
        """Step 2: one listing, taken after the commit, for every lease's verification.

        None when it cannot be taken: each lease then lists (and retries) on its own.
        """
        try:
            return ProcSnapshot(await self.reaper.table.list_all())
        except ProcessTableError:
            return None
        except Exception as exc:  # unexpected: the same, but worth a log line
            log.warning("listing_failed", why=f"{type(exc).__name__}: {exc}")
            return None

    async def verify_each(
        self, leases: list[LeaseRecord], snapshot: ProcSnapshot | None
    ) -> list[tuple[LeaseRecord, Verification]]:
        """Step 3: verify every lease; the verified ones, with their verification.

        Evidence unavailable in the shared listing is retried on the lease's own
        listings. An unverified lease is decided here: lost if its root is
        provably gone, else reopened; nothing of it is ever signalled.
        """
        reaper = self.reaper
        verified: list[tuple[LeaseRecord, Verification]] = []
        for lease in leases:
            verification = await reaper.verify(lease, snapshot)
            if verification.evidence_unavailable:
                verification = await reaper.verify_retrying(lease)
            lease = await reaper.record_verification(lease, verification, self.reason)
            if verification.verified:
                verified.append((lease, verification))
                continue
            state, why = unverified_outcome(verification)
            self.ledger.decide(lease, CloseResult(lease, unverified_reason=why), state)
        return verified

    async def terminate_all(
        self, verified: list[tuple[LeaseRecord, Verification]]
    ) -> set[Identity]:
        """Step 4: SIGTERM every verified tree (children first), then one grace for all.

        The identities still alive after the grace.
        """
        reaper = self.reaper
        for _, verification in verified:
            await reaper.signal_all(verification.processes, signal.SIGTERM)
        everyone = [p for _, v in verified for p in v.processes]
        left = await reaper.wait_gone(everyone, reaper.term_grace_ms / 1000.0)
        return {p.info.identity for p in left}

    async def kill_survivors_each(
        self, verified: list[tuple[LeaseRecord, Verification]], survivors: set[Identity]
    ) -> list[Doomed]:
        """Step 5: per lease with survivors, re-verify right before its SIGKILL.

        A lease whose re-verification cannot prove the tree is still its own is
        reopened with its survivors left alone (exactly as in a single close).
        """
        doomed: list[Doomed] = []
        for lease, verification in verified:
            snap = list(verification.processes)
            left = [p for p in snap if p.info.identity in survivors]
            if not left:
                doomed.append(Doomed(lease, verification))
                continue
            killed, again = await self.reaper.kill_survivors(lease, left)
            if killed is None:
                self.ledger.decide(lease, refused(lease, snap, left, again), LeaseState.OPEN)
                continue
            doomed.append(Doomed(lease, verification, tuple(killed)))
        return doomed

    async def settle(self, doomed: list[Doomed]) -> None:
        """Step 6: wait (all together) for the SIGKILLed to go; each lease's final result.

        Closed, or lost when the root was already gone before the first signal.
        """
        tracked = {i: p for d in doomed for i, p in d.tracked.items()}
        killed = any(d.killed for d in doomed)
        left = await self.reaper.wait_killed(tracked.values(), killed=killed)
        for d in doomed:
            state = LeaseState.LOST if d.verification.root_gone else LeaseState.CLOSED
            self.ledger.decide(d.lease, tally(d.lease, d.tracked.values(), left), state)

    async def write_endings(self) -> None:
        """Step 7: every decided state in one transaction; results carry the stored lease."""
        store = self.reaper.store
        endings = self.ledger.endings
        written = await store.transition_many(endings, now_ms=self.reaper.wall_ms())
        results = self.ledger.results
        for (lease, _), rec in zip(endings, written, strict=True):
            rec = rec or await store.get(lease.lease_id)
            results[lease.lease_id] = replace(results[lease.lease_id], lease=rec)
