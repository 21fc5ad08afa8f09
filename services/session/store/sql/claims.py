"""The claim statements both SQL backends share: take, release, and the fence of a write.

A row's claim says which gateway instance serves the session (several hosts, one
store). These are the conditions and statements that take and drop it, and the
``WHERE`` clauses that keep a holder's write off a row another instance — or a
later generation of the claim — holds (the fence). ``?`` placeholders,
numbered for PostgreSQL with :func:`~.sql.rows.numbered`.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "CLAIMABLE",
    "CLAIM_SESSION",
    "HELD_AT",
    "RELEASABLE",
    "RELEASABLE_AT",
    "RELEASE_CLAIM",
    "RELEASE_CLAIM_AT",
    "delete_filter",
    "release_statement",
    "row_filter",
]

#: A claim may be taken by ``?`` (instance) at time ``?`` (now): free, its own, or expired.
CLAIMABLE: Final = "(active_instance_id = '' OR active_instance_id = ? OR active_until < ?)"
#: A row ``?`` (instance) may mark inactive: its own claim, or nobody's.
RELEASABLE: Final = "active_instance_id IN ('', ?)"
#: The same, fenced: nobody's claim, or instance ``?``'s at generation ``?`` (a claim taken
#: again since — by anyone — has a higher generation).
RELEASABLE_AT: Final = "(active_instance_id = '' OR (active_instance_id = ? AND claim_generation = ?))"
#: A holder's write to a row: instance ``?``'s claim at generation ``?``, and nothing else.
HELD_AT: Final = "active_instance_id = ? AND claim_generation = ?"
#: Instance ``?`` on host ``?`` takes row ``?``'s claim until ``?``, reachable at public URL
#: ``?``, while :data:`CLAIMABLE`, as its next generation; parameters: instance, host,
#: until, public URL, id, instance, now.
CLAIM_SESSION: Final = (
    "UPDATE sessions SET active_instance_id = ?, active_host = ?, active_until = ?,"
    " active_url = ?,"
    f" claim_generation = claim_generation + 1 WHERE id = ? AND {CLAIMABLE}"
)
#: Mark row ``?`` inactive and unclaimed, while :data:`RELEASABLE` by instance ``?``.
RELEASE_CLAIM: Final = (
    "UPDATE sessions SET state = 'inactive', active_instance_id = '', active_host = '',"
    f" active_url = '', active_until = 0 WHERE id = ? AND {RELEASABLE}"
)
#: :data:`RELEASE_CLAIM` fenced: while :data:`RELEASABLE_AT` by instance ``?``, generation ``?``.
RELEASE_CLAIM_AT: Final = (
    "UPDATE sessions SET state = 'inactive', active_instance_id = '', active_host = '',"
    f" active_url = '', active_until = 0 WHERE id = ? AND {RELEASABLE_AT}"
)


def row_filter(session_id: str, holder: str | None,
               generation: int = 0) -> tuple[str, list[Any]]:
    """The ``WHERE`` of a write to one row, guarded by ``holder``'s claim when given: with a
    ``generation``, only while ``holder`` holds the claim at that generation (fenced),
    without one while it holds it or nobody does."""
    if holder is None:
        return "id = ?", [session_id]
    if generation:
        return f"id = ? AND {HELD_AT}", [session_id, holder, generation]
    return f"id = ? AND {RELEASABLE}", [session_id, holder]


def release_statement(session_id: str, instance_id: str,
                      generation: int = 0) -> tuple[str, tuple[Any, ...]]:
    """The release of row ``session_id`` by ``instance_id`` and its parameters: fenced by
    ``generation`` when one is given (:data:`RELEASE_CLAIM_AT`)."""
    if generation:
        return RELEASE_CLAIM_AT, (session_id, instance_id, generation)
    return RELEASE_CLAIM, (session_id, instance_id)


def delete_filter(session_id: str, holder: str | None, now: int) -> tuple[str, list[Any]]:
    """The ``WHERE`` of a delete of one row: with ``holder``, only while no other instance's
    claim is live (free, ``holder``'s own, or expired)."""
    if holder is None:
        return "id = ?", [session_id]
    return f"id = ? AND {CLAIMABLE}", [session_id, holder, now]
