"""The session service's count of the edge workers' slots: each race between a
worker's takes and its reports counts a slot twice for a moment, never zero times."""

from __future__ import annotations

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.session.live.worker_ledger import WorkerLedger

SESSION = pb.SLOT_KIND_SESSION


def who(worker: str, incarnation: str = "a", pool: str = "host") -> pb.WorkerId:
    return pb.WorkerId(pool=pool, worker=worker, incarnation=incarnation)


def take(ledger: WorkerLedger, worker: pb.WorkerId, seq: int, *, principal: str = "client:t",
         limit: int = 10, share: int = 2, now: int = 0) -> bool:
    return ledger.take(pb.TakeSlotRequest(worker=worker, kind=SESSION, principal=principal,
                                          limit=limit, share=share, seq=seq), now).granted


def report(ledger: WorkerLedger, worker: pb.WorkerId, seq: int, held: int,
           principal: str = "client:t", now: int = 0) -> None:
    ledger.report(pb.ReportWorkerRequest(worker=worker, seq=seq, held=[
        pb.HeldSlots(kind=SESSION, principal=principal, count=held)] if held else []), now)


def test_a_share_holds_across_workers_and_frees_with_the_report() -> None:
    ledger = WorkerLedger(ttl_ms=1000)
    one, two = who("h/w1"), who("h/w2")
    assert take(ledger, one, 1) and take(ledger, two, 1)
    refused = ledger.take(pb.TakeSlotRequest(worker=two, kind=SESSION, principal="client:t",
                                             limit=10, share=2, seq=2), 0)
    assert not refused.granted and refused.per_principal and refused.limit == 2
    assert take(ledger, two, 3, principal="client:other")  # another token's share is its own
    report(ledger, one, 1, held=0)  # worker 1 let its session go
    assert take(ledger, two, 4)


def test_a_report_overtaking_the_take_it_holds_does_not_count_it_twice() -> None:
    ledger = WorkerLedger(ttl_ms=1000)
    one = who("h/w1")
    assert take(ledger, one, 1)
    report(ledger, one, 2, held=2)  # the picture at seq 2 holds slots 1 and 2
    assert take(ledger, one, 2)  # the take of slot 2 arrives late: already counted, fits
    assert not take(ledger, one, 3)


def test_an_older_picture_arriving_late_is_ignored() -> None:
    ledger = WorkerLedger(ttl_ms=1000)
    one = who("h/w1")
    assert take(ledger, one, 1) and take(ledger, one, 2)
    report(ledger, one, 2, held=2)
    report(ledger, one, 1, held=1)  # taken before slot 2, delivered after
    assert not take(ledger, one, 3)


def test_a_restarted_worker_replaces_what_its_predecessor_held() -> None:
    ledger = WorkerLedger(ttl_ms=1000)
    one, two = who("h/w1"), who("h/w2")
    assert take(ledger, one, 1) and take(ledger, one, 2)
    assert not take(ledger, two, 1)
    report(ledger, who("h/w1", incarnation="b"), 0, held=0)  # its successor holds nothing
    assert take(ledger, two, 2)


def test_a_silent_worker_is_forgotten_after_the_lease_time() -> None:
    ledger = WorkerLedger(ttl_ms=1000)
    one, two = who("h/w1"), who("h/w2")
    assert take(ledger, one, 1, now=0) and take(ledger, one, 2, now=0)
    assert not take(ledger, two, 1, now=500)
    assert take(ledger, two, 2, now=1500)


def test_pools_count_apart() -> None:
    ledger = WorkerLedger(ttl_ms=1000)
    assert take(ledger, who("a/w1", pool="a"), 1, limit=1)
    assert take(ledger, who("b/w1", pool="b"), 1, limit=1)
    assert not take(ledger, who("a/w2", pool="a"), 1, limit=1)


def _picture(ledger: WorkerLedger, worker: pb.WorkerId, seq: int, held: dict[str, int],
             releasable: dict[str, int]) -> list[tuple[str, int]]:
    """Report ``held`` sessions and ``releasable`` (detached idle) ones by principal; the
    releases the answer orders, as (principal, count)."""
    out = ledger.report(pb.ReportWorkerRequest(worker=worker, seq=seq, held=[
        *(pb.HeldSlots(kind=SESSION, principal=p, count=n) for p, n in held.items()),
        *(pb.HeldSlots(kind=pb.SLOT_KIND_SESSION_RELEASABLE, principal=p, count=n)
          for p, n in releasable.items())]), 0)
    return [(o.principal, o.count) for o in out]


def test_a_detached_idle_session_on_another_worker_is_released_for_its_principal() -> None:
    """A take at the share, while the principal has a detached idle session on another
    worker, orders that worker to release it (once, until a report shows it gone) and is
    granted only after; another principal's take orders nothing of it."""
    ledger = WorkerLedger(ttl_ms=1000)
    one, two = who("h/w1"), who("h/w2")
    assert _picture(ledger, one, 1, {"client:t": 2}, {"client:t": 1}) == []
    first = ledger.take(pb.TakeSlotRequest(worker=two, kind=SESSION, principal="client:t",
                                           limit=10, share=2, seq=1), 0)
    assert not first.granted and first.releasing and first.per_principal
    # Asked again before worker 1 heard of it: still under way, not ordered twice.
    again = ledger.take(pb.TakeSlotRequest(worker=two, kind=SESSION, principal="client:t",
                                           limit=10, share=2, seq=1), 0)
    assert not again.granted and again.releasing
    # Another token at the host's limit gets none of client:t's sessions released.
    other = ledger.take(pb.TakeSlotRequest(worker=two, kind=SESSION, principal="client:u",
                                           limit=2, share=2, seq=2), 0)
    assert not other.granted and not other.releasing
    assert _picture(ledger, one, 2, {"client:t": 2}, {"client:t": 1}) == [("client:t", 1)]
    # Worker 1 released it: its next report says so, and the take is granted.
    assert _picture(ledger, one, 3, {"client:t": 1}, {}) == []
    assert take(ledger, two, 1)
    assert not take(ledger, two, 3)  # the share holds: no session left to release
