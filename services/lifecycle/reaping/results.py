"""What a close or reap did, and where a lease goes after each verdict (SPEC §13).

Shared by the single close (:mod:`services.lifecycle.reaping.reaper`) and the batched
startup pass (:mod:`services.lifecycle.reaping.batch`), so both report the same
outcome for the same evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.lifecycle.leases.store import LeaseRecord, LeaseState
from services.lifecycle.processes.snapshot import Identity, TreeProc
from services.lifecycle.processes.verify import REASON_BIRTH, Verification

#: The compare-and-set of a transition lost: another close moved the lease first.
CHANGED_CONCURRENTLY = "lease changed state concurrently"


@dataclass(frozen=True)
class CloseResult:
    """What a close or reap did."""

    lease: LeaseRecord | None
    terminated_pids: tuple[int, ...] = ()
    surviving_pids: tuple[int, ...] = ()
    #: Empty on success; why nothing (more) was signalled otherwise.
    unverified_reason: str = ""


def pids(procs: Iterable[TreeProc]) -> tuple[int, ...]:
    """The sorted PIDs of ``procs``."""
    return tuple(sorted(p.info.pid for p in procs))


def tally(
    lease: LeaseRecord | None, tracked: Iterable[TreeProc], left: set[Identity]
) -> CloseResult:
    """The result of a reap: which ``tracked`` processes went, which identities are ``left``."""
    procs = list(tracked)
    return CloseResult(
        lease,
        terminated_pids=pids(p for p in procs if p.info.identity not in left),
        surviving_pids=pids(p for p in procs if p.info.identity in left),
    )


def still_ours(again: Verification) -> bool:
    """A re-verification that allows SIGKILL: the tree verified, or its root is provably gone."""
    return not again.evidence_unavailable and (again.verified or again.root_gone)


def unverified_outcome(verification: Verification) -> tuple[LeaseState, str]:
    """Where an unverified lease goes, and the reason to report.

    A provably gone root ends the lease as lost (the reason is reported only for
    a reused PID); anything else reopens it for a later retry, nothing signalled.
    """
    if verification.root_gone:
        return LeaseState.LOST, verification.reason if verification.reason == REASON_BIRTH else ""
    return LeaseState.OPEN, verification.reason


def refused(
    lease: LeaseRecord | None,
    snapshot: Sequence[TreeProc],
    survivors: Sequence[TreeProc],
    again: Verification,
) -> CloseResult:
    """The result when the re-verification before SIGKILL failed: survivors left alone."""
    return CloseResult(
        lease,
        terminated_pids=pids(p for p in snapshot if p not in survivors),
        surviving_pids=pids(survivors),
        unverified_reason=f"re-verification failed: {again.reason}",
    )
