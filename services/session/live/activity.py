"""What the edges last reported their sessions to be doing: in memory only.

Each instance's report (``ReportActivity``) is the whole picture of what it
serves and replaces the one before; a report older than a claim's lease time
is stale (its edge stopped beating) and counts no more. Nothing here is ever
stored: the service forgets it all when it stops, and the next beats tell it
again. Bounded: at most :data:`MAX_INSTANCES` instances (the stalest go first)
and :data:`MAX_SESSIONS_PER_REPORT` sessions each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from acpgate_contracts.session.v1 import session_pb2

__all__ = ["MAX_INSTANCES", "MAX_SESSIONS_PER_REPORT", "ActivityBoard"]

#: Reporting instances remembered at most (each host's edge, each ``acpgate acp``).
MAX_INSTANCES = 1024
#: Sessions one report may carry (far above any ``[acp] max_sessions`` in use).
MAX_SESSIONS_PER_REPORT = 10_000


@dataclass
class _Report:
    host: str
    at: int
    sessions: dict[str, session_pb2.SessionActivity] = field(default_factory=dict)


class ActivityBoard:
    """The latest report of every instance, read by session id for the live sessions."""

    def __init__(self, ttl_ms: int) -> None:
        #: How long a report counts without the next one (a claim's lease time).
        self.ttl_ms = ttl_ms
        self._reports: dict[str, _Report] = {}

    def report(self, instance_id: str, host: str,
               sessions: Iterable[session_pb2.SessionActivity], now: int) -> None:
        """``instance_id``'s report at ``now`` (ms), replacing its last one."""
        kept: dict[str, session_pb2.SessionActivity] = {}
        for activity in sessions:
            if len(kept) >= MAX_SESSIONS_PER_REPORT:
                break
            kept[activity.session_id] = activity
        self._reports.pop(instance_id, None)  # re-inserted last: the freshest
        self._reports[instance_id] = _Report(host, now, kept)
        self._prune(now)

    def _prune(self, now: int) -> None:
        for instance_id in [i for i, r in self._reports.items() if now - r.at > self.ttl_ms]:
            del self._reports[instance_id]
        while len(self._reports) > MAX_INSTANCES:
            del self._reports[next(iter(self._reports))]

    def of(self, instance_id: str, session_id: str,
           now: int) -> tuple[session_pb2.SessionActivity, int] | None:
        """What ``instance_id`` last reported of ``session_id`` and when; None when it did
        not report it, or its report is stale."""
        report = self._reports.get(instance_id)
        if report is None or now - report.at > self.ttl_ms:
            return None
        activity = report.sessions.get(session_id)
        return (activity, report.at) if activity is not None else None
