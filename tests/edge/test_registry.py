"""Session slots: ``max_sessions`` and each token's share of it (SPEC §9)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from services.common.config import AcpSection
from services.edge.sessions.registry import SessionRegistry, SlotRefusal, token_session_share

A, B = "client:a", "client:b"


def _active(registry: SessionRegistry, sid: str, principal: str) -> None:
    session: Any = SimpleNamespace(principal=principal)
    registry.active[sid] = session


def test_share_divides_max_sessions_among_the_active_tokens() -> None:
    """One token may use every slot; several split them, at least one each; an explicit
    ``max_sessions_per_token`` wins whatever the count."""
    assert token_session_share(AcpSection(max_sessions=10)) == 10
    assert token_session_share(AcpSection(max_sessions=10), active_tokens=0) == 10
    assert token_session_share(AcpSection(max_sessions=10), active_tokens=2) == 5
    assert token_session_share(AcpSection(max_sessions=10), active_tokens=4) == 2
    assert token_session_share(AcpSection(max_sessions=3), active_tokens=5) == 1
    explicit = AcpSection(max_sessions=10, max_sessions_per_token=7)
    assert token_session_share(explicit) == 7
    assert token_session_share(explicit, active_tokens=3) == 7


def test_a_token_gets_its_share_others_still_get_theirs() -> None:
    """Reserved and active sessions of one token count against it; another token and the
    local user are not held back by it; the global limit still holds for everyone."""
    reg = SessionRegistry(max_sessions=6, per_token=2)
    assert reg.try_reserve(A) is None
    _active(reg, "a1", A)
    assert reg.try_reserve(A) == SlotRefusal(2, per_token=True)
    assert reg.try_reserve(B) is None and reg.try_reserve(B) is None
    assert reg.try_reserve(B) == SlotRefusal(2, per_token=True)
    assert reg.try_reserve("local") is None and reg.try_reserve("local") is None  # no share
    assert reg.try_reserve("local") == SlotRefusal(6, per_token=False)  # max_sessions only
    reg.unreserve(A)
    del reg.active["a1"]
    assert reg.try_reserve(A) is None and reg.reserved_by[A] == 1


def test_a_slot_moves_to_the_principal_of_the_row() -> None:
    """The operator restoring B's session: the slot counts against B (refused, and left
    where it was, when B's share is full)."""
    reg = SessionRegistry(max_sessions=10, per_token=1)
    assert reg.try_reserve("local") is None
    assert reg.move("local", B) is None
    assert reg.reserved_by == {B: 1}
    assert reg.try_reserve("local") is None
    assert reg.move("local", B) == SlotRefusal(1, per_token=True)
    assert reg.reserved_by == {B: 1, "local": 1}
    reg.unreserve("local")
    reg.unreserve(B)
    assert reg.reserved == 0 and not reg.reserved_by
