"""The limits one host's edge workers share: in memory only.

``acpgate serve`` may run several edge processes on one port; ``[gateway]
max_connections`` / ``max_connections_per_token`` and ``[acp] max_sessions`` /
``max_sessions_per_token`` are the host's, not each worker's. The workers of one
*pool* (one host: its lifecycle instance id) report here what they hold, and take
every new connection or session here before it counts: :class:`WorkerLedger`
grants it only while the pool's workers together stay within the limit and the
principal within its share.

What a worker holds is what it last reported (:meth:`WorkerLedger.report`: its
whole picture) plus the slots granted to it since that picture was taken. The
worker numbers its local changes (``seq``): it counts a slot locally first, then
takes it with the number it counted it at; a report names the number its picture
was taken at, so a grant is dropped from the ledger exactly when a report holding
it arrives, whatever order the two RPCs land in. Every error of this scheme
counts a slot twice for a moment (a refused slot in a picture until the next
one), never none.

Room (``SLOT_KIND_SESSION_RELEASABLE``): each worker also reports, per principal, how
many of its sessions are detached and idle — ones it lets go when their principal
needs room. A take of a session refused for the limit or the principal's share, while
the principal has such a session on some worker of the pool, is refused with
``releasing``: that worker is told, in the answer to its next report, to release one,
and the taker takes again once it did (its next report no longer holds it). A
release ordered is not ordered twice, and while one of a principal's is under way (until
the first report of that worker after the order went out) its takes wait for it rather
than order more: a take taken again must not cost a second session. Only the principal's own sessions are
released for it, never another's; nothing is granted beyond a limit meanwhile.

A worker that stops reporting (killed with SIGKILL) is forgotten after
:attr:`WorkerLedger.ttl_ms`, its slots with it; a restarted worker (same name,
new ``incarnation``) replaces what its predecessor held at once. Nothing is
stored: a restarted session service learns every worker's picture again from its
next report. Bounded: at most :data:`MAX_WORKERS_KEPT` workers, the stalest go
first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from acpgate_contracts.session.v1 import session_pb2 as pb

__all__ = ["MAX_WORKERS_KEPT", "Grant", "WorkerLedger"]

#: Workers remembered at most (every pool's together).
MAX_WORKERS_KEPT = 4096
#: Counters one report may carry.
MAX_COUNTERS = 1024

_Key = tuple[int, str]  # (SlotKind, principal)


@dataclass(frozen=True)
class Grant:
    """The answer to a take: granted, or refused for the limit or the principal's share."""

    granted: bool
    per_principal: bool = False
    limit: int = 0
    #: Refused, but one of the principal's releasable sessions is being released.
    releasing: bool = False


@dataclass
class _Worker:
    pool: str
    incarnation: str
    seen_at: int
    #: The last picture applied, and the ``seq`` it was taken at.
    held: Counter[_Key] = field(default_factory=Counter)
    seq: int = -1
    #: Slots granted since, with the ``seq`` each was counted at.
    grants: list[tuple[int, _Key]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    reported_at: int = 0
    #: Releases ordered, by principal: to send with the next report's answer, and sent
    #: but not yet reflected by a report.
    to_release: Counter[str] = field(default_factory=Counter)
    releasing: Counter[str] = field(default_factory=Counter)

    def holds(self) -> Counter[_Key]:
        """The picture plus the grants not in it yet."""
        out = Counter(self.held)
        for _, key in self.grants:
            out[key] += 1
        return out


class WorkerLedger:
    """What every edge worker holds, by pool; decides each take."""

    def __init__(self, ttl_ms: int) -> None:
        #: How long a worker counts without a report (a claim's lease time).
        self.ttl_ms = ttl_ms
        self._workers: dict[str, _Worker] = {}

    def _worker(self, who: pb.WorkerId, now: int) -> _Worker:
        """``who``'s entry, a fresh one for a new worker or a new incarnation of it."""
        key = f"{who.pool}\x00{who.worker}"
        entry = self._workers.pop(key, None)  # re-inserted last: the freshest
        if entry is None or entry.incarnation != who.incarnation or entry.pool != who.pool:
            entry = _Worker(who.pool, who.incarnation, now)
        entry.seen_at = now
        self._workers[key] = entry
        self._prune(now)
        return entry

    def _prune(self, now: int) -> None:
        for key in [k for k, w in self._workers.items() if now - w.seen_at > self.ttl_ms]:
            del self._workers[key]
        while len(self._workers) > MAX_WORKERS_KEPT:
            del self._workers[next(iter(self._workers))]

    def _pool(self, pool: str) -> Iterable[_Worker]:
        return (w for w in self._workers.values() if w.pool == pool)

    def take(self, request: pb.TakeSlotRequest, now: int) -> Grant:
        """Grant one slot of ``request.kind`` for ``request.principal`` to its worker, or the
        refusal: the pool's workers already hold ``limit`` of the kind, or the principal
        its ``share``. A slot the worker's applied picture already holds (a report with a
        later ``seq`` overtook this take) is checked without itself."""
        me = self._worker(request.worker, now)
        key: _Key = (request.kind, request.principal)
        counted = request.seq <= me.seq  # already in the applied picture
        total = by_principal = -1 if counted else 0
        for worker in self._pool(me.pool):
            for (kind, principal), n in worker.holds().items():
                if kind == request.kind:
                    total += n
                    if principal == request.principal:
                        by_principal += n
        refused: Grant | None = None
        if request.limit and total >= request.limit:
            refused = Grant(False, False, request.limit)
        elif request.share and request.principal and by_principal >= request.share:
            refused = Grant(False, True, request.share)
        if refused is not None:
            if request.kind == pb.SLOT_KIND_SESSION and (
                    self._under_way(me.pool, request.principal)
                    or self._order_release(me.pool, request.principal)):
                return Grant(False, refused.per_principal, refused.limit, releasing=True)
            return refused
        if not counted:
            me.grants.append((request.seq, key))
        return Grant(True)

    def _order_release(self, pool: str, principal: str) -> bool:
        """Order one of ``principal``'s releasable sessions released, on a worker holding
        one not ordered yet; False when there is none."""
        if not principal:
            return False
        key = (pb.SLOT_KIND_SESSION_RELEASABLE, principal)
        for worker in self._pool(pool):
            free = worker.held[key] - worker.to_release[principal] - worker.releasing[principal]
            if free > 0:
                worker.to_release[principal] += 1
                return True
        return False

    def _under_way(self, pool: str, principal: str) -> bool:
        """Whether a release of ``principal``'s is ordered and not yet reported done."""
        return any(w.to_release[principal] or w.releasing[principal] for w in self._pool(pool))

    def report(self, request: pb.ReportWorkerRequest, now: int) -> list[pb.HeldSlots]:
        """Apply a worker's picture (unless a later one was applied already) and keep its
        counters; the releases it is to make (module doc)."""
        me = self._worker(request.worker, now)
        me.releasing = me.to_release  # reflected by the report after the next one
        me.to_release = Counter()
        release = [pb.HeldSlots(kind=pb.SLOT_KIND_SESSION_RELEASABLE, principal=p, count=n)
                   for p, n in sorted(me.releasing.items()) if n > 0]
        if request.seq < me.seq:
            return release  # overtaken by a later picture
        me.held = Counter({(h.kind, h.principal): h.count for h in request.held if h.count})
        me.seq = request.seq
        me.grants = [(seq, key) for seq, key in me.grants if seq > request.seq]
        me.counters = dict(list(request.counters.items())[:MAX_COUNTERS])
        me.reported_at = now
        return release

    def counters(self, pool: str, now: int) -> list[tuple[str, Mapping[str, int], int]]:
        """``(worker, counters, reported_at)`` of the pool's live workers."""
        self._prune(now)
        out: list[tuple[str, Mapping[str, int], int]] = []
        for key, worker in self._workers.items():
            if worker.pool == pool and worker.reported_at:
                out.append((key.split("\x00", 1)[1], worker.counters, worker.reported_at))
        return out
