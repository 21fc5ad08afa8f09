"""The storage quotas on the event log: what a session's part of a batch adds, and whether
it may (``[store] max_session_bytes`` / ``max_token_bytes``).

A logged event's payload counts against the same totals as the stored history — the
session row's ``stored_bytes`` and its owner's ``owner_usage`` —, so the quotas bound
everything a session keeps in the store, and ``session/delete`` gives it all back. An
event already stored counts once: a batch sent again adds nothing. A part that would
pass a quota writes none of its events (refused ``protocol.REFUSED_QUOTA`` with the
quota's sentence); its turn ends are still written to turns already started, which adds no
bytes, so a turn's state stays true.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from services.common.protocol import REFUSED_QUOTA
from services.session.store.checks import check_owner_quota, check_session_quota
from services.session.store.event_log import LoggedEvent
from services.session.store.records import Quota, QuotaExceeded

__all__ = ["ADD_SESSION_BYTES", "END_STARTED_TURN", "REFUSED_QUOTA", "SELECT_LOGGED_IDS",
           "SELECT_OWNER_BYTES", "id_range", "quota_refusal", "unlogged"]

#: The ids already logged in a range (parameters: session id, lowest, highest).
SELECT_LOGGED_IDS: Final = (
    "SELECT event_id FROM events WHERE session_id = ? AND event_id >= ? AND event_id <= ?")
#: An owner's running total (parameter: owner).
SELECT_OWNER_BYTES: Final = "SELECT stored_bytes FROM owner_usage WHERE owner_session_key = ?"
#: Add bytes to a session row's total (parameters: bytes, session id).
ADD_SESSION_BYTES: Final = "UPDATE sessions SET stored_bytes = stored_bytes + ? WHERE id = ?"
#: A turn already started ends (parameters: state, at, session id, turn id): a refused
#: part's turn ends, which add no row.
END_STARTED_TURN: Final = (
    "UPDATE turns SET state = ?, ended_at = ? WHERE session_id = ? AND turn_id = ?"
    " AND state = 'running'")


def id_range(events: Sequence[LoggedEvent]) -> tuple[int, int]:
    """The lowest and highest event id of ``events`` (not empty)."""
    ids = [e.event_id for e in events]
    return min(ids), max(ids)


def unlogged(events: Sequence[LoggedEvent], logged: Iterable[int]) -> list[LoggedEvent]:
    """The events of ``events`` not among the ``logged`` ids, each id once."""
    seen = set(logged)
    out = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            out.append(event)
    return out


def quota_refusal(stored: int, adding: int, owner: str, owner_total: int,
                  quota: Quota | None) -> str:
    """"" when ``adding`` bytes fit the session (holding ``stored``) and its owner
    (holding ``owner_total``); else ``REFUSED_QUOTA`` and the quota's sentence."""
    try:
        check_session_quota(stored, adding, quota)
        check_owner_quota(owner, owner_total + adding, quota)
    except QuotaExceeded as exc:
        return REFUSED_QUOTA + str(exc)
    return ""
