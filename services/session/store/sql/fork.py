"""What both SQL backends share to fork a session (ACP ``session/fork``).

A fork is one transaction: the parent's row is read (PostgreSQL locks it ``FOR
SHARE``, SQLite's ``BEGIN IMMEDIATE`` already holds the write lock), the copied
bytes are added to the owner's total and checked against the quotas, the new
row is inserted as :data:`~.sql.rows.INSERT_SESSION` inserts any, the parent's
history is copied row for row inside the database (never through the process),
and the new row gets the parent's counters and state. :func:`fork_plan` says
what goes where; the statements use ``?`` placeholders (PostgreSQL numbers them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from services.session.store.records import ITEM_FIELDS, NewSession, SessionRecord, session_key_for
from services.session.store.sql.rows import SESSION_COLUMNS, new_row_values

__all__ = ["COPY_HISTORY", "FORK_SOURCE", "LAST_TURN_AT", "LOG_BYTES_AT", "SET_FORK_STATE",
           "ForkPlan", "fork_owner", "fork_plan"]

#: The parent row, its turn counter (``last_turn`` is no record field) and the bytes of
#: its event log (counted in its ``stored_bytes``, not copied): the
#: :data:`SESSION_COLUMNS`, then ``last_turn`` at :data:`LAST_TURN_AT`, the log's bytes
#: at :data:`LOG_BYTES_AT`.
FORK_SOURCE: Final = (
    f"SELECT {SESSION_COLUMNS}, last_turn, (SELECT COALESCE(SUM(length(payload)"
    " + length(prefix)), 0) FROM event_chunks WHERE event_chunks.session_id = sessions.id)"
    " FROM sessions WHERE id = ?")
#: Where ``last_turn`` is in a :data:`FORK_SOURCE` row.
LAST_TURN_AT: Final = SESSION_COLUMNS.count(",") + 1
#: Where the parent's log bytes are in a :data:`FORK_SOURCE` row.
LOG_BYTES_AT: Final = LAST_TURN_AT + 1
_ITEMS: Final = ", ".join(ITEM_FIELDS)
#: Copy every history item of session ``?`` (the parent, second parameter) to session ``?``
#: (the fork, first), seq, turn and times kept: the fork's history reads like the parent's.
COPY_HISTORY: Final = (
    f"INSERT INTO history (session_id, seq, turn, role, {_ITEMS}, created_at)"
    f" SELECT ?, seq, turn, role, {_ITEMS}, created_at FROM history WHERE session_id = ?"
)
#: The fork row's copied state; parameters: :attr:`ForkPlan.state`. Its log starts after
#: the copied turns (a replay reads those from the history).
SET_FORK_STATE: Final = (
    "UPDATE sessions SET plan_json = ?, mode_id = ?, config_json = ?, last_seq = ?,"
    " last_turn = ?, stored_bytes = ?, forked_from = ?, log_from_turn = 0 WHERE id = ?"
)


@dataclass(frozen=True)
class ForkPlan:
    """The writes of one fork, decided from the parent row as the transaction read it."""

    #: :data:`~.sql.rows.INSERT_SESSION` parameters of the new row.
    insert: tuple[Any, ...]
    #: The owner whose total the copied bytes add to (the quotas' principal).
    owner: str
    #: The bytes of the copied history (the parent's ``stored_bytes`` less its log's).
    copied_bytes: int
    #: :data:`SET_FORK_STATE` parameters.
    state: tuple[Any, ...]


def fork_owner(parent: SessionRecord, session_key: str) -> str:
    """The fork's owner: the parent's owner — unless that is the parent itself (a top-level
    session owns itself), then the fork owns itself too, as any new session would (same
    principal: both are the local user's, or both a token's)."""
    owner = parent.ownership.owner_session_key
    if not owner or owner == parent.ownership.session_key:
        return parent.ownership.spawned_by or session_key
    return owner


def fork_plan(parent: SessionRecord, last_turn: int, session_id: str, *, agent_alias: str,
              gateway_instance_id: str, host: str, claim_ttl_ms: int, now: int,
              public_url: str = "",
              additional_directories: Sequence[str] | None,
              mcp_servers_json: str | None, text: Callable[[str], str] = str,
              log_bytes: int = 0) -> ForkPlan:
    """What a fork of ``parent`` (its turn counter ``last_turn``, ``log_bytes`` of event
    log) as ``session_id`` writes (InvalidItem as :func:`~.sql.rows.new_row_values`
    refuses); ``text`` encodes free text for the backend."""
    o = parent.ownership
    owner = fork_owner(parent, session_key_for(agent_alias, session_id))
    insert = new_row_values(NewSession(
        session_id, agent_alias, parent.workspace_dir,
        spawned_by=o.spawned_by, parent_session_key=o.parent_session_key,
        owner_session_key=owner, gateway_instance_id=gateway_instance_id,
        mcp_servers_json=parent.mcp_servers_json if mcp_servers_json is None
        else mcp_servers_json,
        additional_directories=parent.additional_directories if additional_directories is None
        else additional_directories,
        title=parent.title, host=host, public_url=public_url, claim_ttl_ms=claim_ttl_ms,
    ), now, text=text)
    copied = max(0, parent.stored_bytes - log_bytes)
    state = (parent.plan_json, parent.mode_id, parent.config_json, parent.message_count,
             last_turn, copied, parent.session_id, session_id)
    return ForkPlan(insert, owner, copied, state)
