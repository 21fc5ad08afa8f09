"""The edges' activity reports, kept in memory by the session service."""

from __future__ import annotations

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.session.live.activity import MAX_INSTANCES, ActivityBoard


def act(sid: str, state: int = pb.ACTIVITY_STATE_IDLE) -> pb.SessionActivity:
    return pb.SessionActivity(session_id=sid, state=state)


def test_a_report_replaces_the_instances_last_and_goes_stale_after_the_lease() -> None:
    board = ActivityBoard(ttl_ms=30_000)
    board.report("gw-a", "host-a", [act("s1", pb.ACTIVITY_STATE_TURN), act("s2")], now=1_000)
    got = board.of("gw-a", "s1", now=2_000)
    assert got is not None and got[0].state == pb.ACTIVITY_STATE_TURN and got[1] == 1_000
    assert board.of("gw-b", "s1", now=2_000) is None  # another instance's claim: not its word
    board.report("gw-a", "host-a", [act("s2")], now=3_000)  # s1 is not served there any more
    assert board.of("gw-a", "s1", now=3_000) is None
    assert board.of("gw-a", "s2", now=3_000 + 30_000) is not None
    assert board.of("gw-a", "s2", now=3_000 + 30_001) is None  # its edge stopped beating


def test_the_board_is_bounded() -> None:
    board = ActivityBoard(ttl_ms=10**9)
    for n in range(MAX_INSTANCES + 5):
        board.report(f"gw-{n}", "h", [act("s")], now=n)
    assert board.of("gw-0", "s", now=10) is None  # the stalest went first
    assert board.of(f"gw-{MAX_INSTANCES + 4}", "s", now=10) is not None
