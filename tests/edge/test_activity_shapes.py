"""The heartbeat's look between renewals: it compares what an operator would see of each
session (:meth:`SessionRegistry.shapes`, no report built) with what it reported last,
and reports at once when that changed — a turn starting on an idle session — but not
when nothing did.

The session service is a stand-in that records reports and renewals (the real one is in
tests/ops/test_ps.py, through ``acpgate ps``).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from services.edge.backends.session import SessionBackend
from services.edge.sessions.activity import shape
from services.edge.sessions.claims import ACTIVITY_TICK_SECS, HostClaims
from services.edge.sessions.registry import SessionRegistry


class _Clients:
    def count(self) -> int:
        return 1


def _session(sid: str) -> Any:
    attached = asyncio.Event()
    attached.set()
    return SimpleNamespace(session_id=sid, lease_id=f"lease-{sid}", turn=None,
                           attached=attached, clients=_Clients(), idle_for=lambda: 1.0,
                           principal="local")


class _Service:
    def __init__(self) -> None:
        self.reports: list[list[Any]] = []
        self.renewals = 0

    async def report_activity(self, _instance: str, _host: str, activity: list[Any]) -> None:
        self.reports.append(activity)

    async def renew_claims(self, _instance: str, _ids: list[str]) -> list[str]:
        self.renewals += 1
        return []


async def _until(check: Any) -> None:
    for _ in range(6000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


def test_shapes_are_what_a_report_would_say() -> None:
    reg: SessionRegistry[Any] = SessionRegistry(max_sessions=10)
    reg.active["a"] = _session("a")
    reg.active["b"] = _session("b")
    reg.active["b"].turn = object()
    reg.restoring.add("c")
    reg.creating.add("a")  # still listed once, as the live session
    assert reg.shapes() == shape(reg.serving().values())


async def test_a_change_between_renewals_is_reported_and_no_change_is_not() -> None:
    service = _Service()
    claims = HostClaims(cast(SessionBackend, service))
    claims.configure("instance-1", ttl_ms=3_600_000)  # no renewal during the test
    reg: SessionRegistry[Any] = SessionRegistry(max_sessions=10)
    reg.active["a"] = _session("a")
    beat = asyncio.create_task(claims.heartbeat(reg.serving, lambda _sid: None, reg.shapes))
    try:
        await _until(lambda: len(service.reports) == 1)  # the first look: nothing reported yet
        await asyncio.sleep(4 * ACTIVITY_TICK_SECS)
        assert len(service.reports) == 1, "reported again with nothing changed"

        reg.active["a"].turn = object()  # a turn starts
        await _until(lambda: len(service.reports) == 2)
        assert [a.state for a in service.reports[1]] != [a.state for a in service.reports[0]]
        assert service.renewals == 0
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
