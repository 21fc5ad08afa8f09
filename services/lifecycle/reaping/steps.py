"""The steps a reap is made of: fail-closed verification, identity-checked signals, waits.

A single close (:class:`~services.lifecycle.reaping.reaper.Reaper`) and a batched pass
(:class:`~services.lifecycle.reaping.batch.ReapPass`) order the same steps; both take
them from :class:`ReapSteps`. A signal always names a ``(pid, start_time)`` identity taken
from a verification, so a PID recycled meanwhile is never hit.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from services.common.logs import get_logger
from services.lifecycle.leases.store import LeaseRecord, LeaseStore
from services.lifecycle.processes.snapshot import Identity, ProcSnapshot, TreeProc, children_first
from services.lifecycle.processes.table import ProcessTable, ProcessTableError, ProcInfo
from services.lifecycle.processes.verify import Owner, Verification, verify_owned_tree
from services.lifecycle.reaping.results import still_ours

#: The reaper's logger: the steps are part of the reaper's story in the logs.
log = get_logger("lifecycle.reaper")

POLL_SECS = 0.05
#: Transient "cannot tell right now" answers are retried this often before failing closed.
VERIFY_ATTEMPTS = 5
#: How long to wait for SIGKILLed processes to disappear before reporting survivors.
KILL_WAIT_SECS = 2.0

__all__ = ["KILL_WAIT_SECS", "POLL_SECS", "VERIFY_ATTEMPTS", "ReapSteps", "now_ms"]


def now_ms() -> int:
    """Wall clock in milliseconds since the epoch."""
    return int(time.time() * 1000)


class ReapSteps:
    """The steps of a reap for one gateway instance: its store, process table and owner."""

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
