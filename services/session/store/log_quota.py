"""The storage quotas on the event log: what a session's part of a batch adds, and whether
it may (``[store] max_session_bytes`` / ``max_token_bytes``).

A logged chunk's bytes (its payload and prefix: what the store keeps of its events) count
against the same totals as the stored history — the session row's ``stored_bytes`` and
its owner's ``owner_usage`` —, so the quotas bound everything a session keeps in the
store, and ``session/delete`` gives it all back. A chunk already stored counts once: a
batch sent again adds nothing. A part that would
pass a quota writes none of its events (refused ``protocol.REFUSED_QUOTA`` with the
quota's sentence); its turn ends are still written to turns already started, which adds no
bytes, so a turn's state stays true.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from services.common.protocol import REFUSED_QUOTA
from services.session.store.checks import check_owner_quota, check_session_quota
from services.session.store.event_log import EventChunk
from services.session.store.records import Quota, QuotaExceeded

__all__ = ["ADD_SESSION_BYTES", "END_STARTED_TURN", "REFUSED_QUOTA", "SELECT_LOGGED_IDS",
           "SELECT_OWNER_BYTES", "id_range", "quota_refusal", "stored_bytes", "unlogged"]

#: The chunks already logged in a range, by first event id (parameters: session id,
#: lowest, highest).
SELECT_LOGGED_IDS: Final = (
    "SELECT first_event_id FROM event_chunks WHERE session_id = ? AND first_event_id >= ?"
    " AND first_event_id <= ?")
#: An owner's running total (parameter: owner).
SELECT_OWNER_BYTES: Final = "SELECT stored_bytes FROM owner_usage WHERE owner_session_key = ?"
#: Add bytes to a session row's total (parameters: bytes, session id).
ADD_SESSION_BYTES: Final = "UPDATE sessions SET stored_bytes = stored_bytes + ? WHERE id = ?"
#: A turn already started ends (parameters: state, at, session id, turn id): a refused
#: part's turn ends, which add no row.
END_STARTED_TURN: Final = (
    "UPDATE turns SET state = ?, ended_at = ? WHERE session_id = ? AND turn_id = ?"
    " AND state = 'running'")


def id_range(chunks: Sequence[EventChunk]) -> tuple[int, int]:
    """The lowest and highest first event id of ``chunks`` (not empty)."""
    ids = [c.first for c in chunks]
    return min(ids), max(ids)


def unlogged(chunks: Sequence[EventChunk], logged: Iterable[int]) -> list[EventChunk]:
    """The chunks of ``chunks`` whose first event id is not among ``logged``, each once."""
    seen = set(logged)
    out = []
    for chunk in chunks:
        if chunk.first not in seen:
            seen.add(chunk.first)
            out.append(chunk)
    return out


def stored_bytes(chunks: Sequence[EventChunk]) -> int:
    """What ``chunks`` add to the store's totals."""
    return sum(len(c.payload) + len(c.prefix) for c in chunks)


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
