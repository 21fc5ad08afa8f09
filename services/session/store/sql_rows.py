"""What the SQL backends share: column lists, row → record, the update and turn builders.

SQLite and PostgreSQL store the same tables with the same column names, so the
statements and the row decoding are written once, with ``?`` placeholders;
the PostgreSQL store numbers them (``$1``, ``$2``…) with :func:`numbered`.
What differs — ``MAX`` versus ``GREATEST``, locking, transactions — stays in
each backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Protocol

from services.common.protocol import HISTORY_ROLE_USER
from services.session.store.records import (
    ITEM_FIELDS,
    Claim,
    HistoryEntry,
    Ownership,
    SessionRecord,
    item_values,
    make_title,
    session_key_for,
    validate_item,
)

__all__ = [
    "CLAIMABLE",
    "HISTORY_COLUMNS",
    "INSERT_ITEM",
    "RELEASABLE",
    "SELECT_CAPABILITIES",
    "SESSION_COLUMNS",
    "UPSERT_CAPABILITIES",
    "Row",
    "TurnRows",
    "list_filter",
    "numbered",
    "record_from_row",
    "row_filter",
    "update_assignments",
]

SESSION_COLUMNS: Final = (
    "id, agent_alias, workspace_dir, created_at, last_activity, token_count, plan_json, state,"
    " lease_id, adapter_session_id, title, session_key, spawned_by, parent_session_key,"
    " owner_session_key, agent_id, backend, gateway_instance_id, owner_created_at, last_seq,"
    " mcp_servers_json, active_instance_id, active_host, active_until"
)
#: Every HistoryEntry field in declaration order: a history row is ``HistoryEntry(*row)``.
HISTORY_COLUMNS: Final = ", ".join(f.name for f in fields(HistoryEntry))
INSERT_ITEM: Final = (
    f"INSERT INTO history (session_id, seq, turn, role, {', '.join(ITEM_FIELDS)}, created_at)"
    f" VALUES (?, ?, ?, ?, {', '.join(['?'] * len(ITEM_FIELDS))}, ?)"
)
#: A claim may be taken by ``?`` (instance) at time ``?`` (now): free, its own, or expired.
CLAIMABLE: Final = "(active_instance_id = '' OR active_instance_id = ? OR active_until < ?)"
#: A row ``?`` (instance) may mark inactive: its own claim, or nobody's.
RELEASABLE: Final = "active_instance_id IN ('', ?)"
#: Record alias ``?``'s adapter capabilities ``?`` at time ``?``, replacing what was there.
UPSERT_CAPABILITIES: Final = (
    "INSERT INTO agent_capabilities (alias, capabilities_json, recorded_at) VALUES (?, ?, ?)"
    " ON CONFLICT (alias) DO UPDATE SET capabilities_json = excluded.capabilities_json,"
    " recorded_at = excluded.recorded_at"
)
SELECT_CAPABILITIES: Final = "SELECT capabilities_json FROM agent_capabilities WHERE alias = ?"


class Row(Protocol):
    """A result row of either driver: indexable by column position."""

    def __getitem__(self, index: int, /) -> Any: ...


def numbered(sql: str) -> str:
    """``?`` placeholders → ``$1``, ``$2``… (the statements here hold no literal ``?``)."""
    parts = sql.split("?")
    out = [parts[0]]
    for n, part in enumerate(parts[1:], start=1):
        out.append(f"${n}{part}")
    return "".join(out)


def record_from_row(r: Row, text: Callable[[str], str] = str) -> SessionRecord:
    """A :data:`SESSION_COLUMNS` row as a record (``text`` decodes stored free text)."""
    return SessionRecord(
        session_id=r[0],
        agent_alias=r[1],
        workspace_dir=r[2],
        created_at=int(r[3]),
        last_activity=int(r[4]),
        token_count=int(r[5]),
        plan_json=r[6],
        state=r[7],
        lease_id=r[8],
        adapter_session_id=text(r[9]),
        title=text(r[10]),
        ownership=Ownership(
            session_key=r[11],
            spawned_by=r[12],
            parent_session_key=r[13],
            owner_session_key=r[14],
            agent_id=r[15],
            backend=r[16],
            gateway_instance_id=r[17],
            created_at=int(r[18]),
        ),
        message_count=int(r[19]),
        mcp_servers_json=r[20],
        claim=Claim(instance_id=r[21], host=r[22], until=int(r[23])),
    )


def update_assignments(
    session_id: str,
    *,
    state: str | None,
    lease_id: str | None,
    adapter_session_id: str | None,
    plan_json: str | None,
    agent_alias: str | None,
    title: str | None,
    mcp_servers_json: str | None = None,
    text: Callable[[str], str] = str,
) -> tuple[list[str], list[Any]]:
    """The ``SET`` assignments and their parameters of an update (None = unchanged).

    The title goes through ``make_title``; a legacy row without ownership gets its
    session key, agent id and owner on the first alias it is bound to. ``text``
    encodes stored free text for the backend.
    """
    sets: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("state", state),
        ("lease_id", lease_id),
        ("adapter_session_id", None if adapter_session_id is None else text(adapter_session_id)),
        ("plan_json", plan_json),
        ("agent_alias", agent_alias),
        ("title", None if title is None else text(make_title(title))),
        ("mcp_servers_json", mcp_servers_json),
    ):
        if value is not None:
            sets.append(f"{column} = ?")
            params.append(value)
    if agent_alias:
        key = session_key_for(agent_alias, session_id)
        sets.append("session_key = CASE WHEN session_key = '' THEN ? ELSE session_key END")
        sets.append("agent_id = CASE WHEN agent_id = '' THEN ? ELSE agent_id END")
        sets.append(
            "owner_session_key = CASE WHEN owner_session_key = '' THEN ? "
            "ELSE owner_session_key END"
        )
        params += [key, agent_alias, key]
    return sets, params


def row_filter(session_id: str, holder: str | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` of a write to one row, guarded by ``holder``'s claim when given."""
    if holder is None:
        return "id = ?", [session_id]
    return f"id = ? AND {RELEASABLE}", [session_id, holder]


def list_filter(cwd: str, after: tuple[int, str] | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause ("" for none) of a list page: one workspace, after a position in
    (last_activity DESC, id DESC) order."""
    where: list[str] = []
    params: list[Any] = []
    if cwd:
        where.append("workspace_dir = ?")
        params.append(cwd)
    if after is not None:
        where.append("(last_activity < ? OR (last_activity = ? AND id < ?))")
        params += [after[0], after[0], after[1]]
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


@dataclass
class TurnRows:
    """The history rows of one turn, numbered after the row's counters.

    :meth:`rows` validates each item as it produces its row, so a backend that
    writes rows as they come has written the good items before a bad one
    raises — and its transaction must roll them back. ``seq`` and ``title``
    follow the rows produced; ``first`` is the turn's first seq.
    """

    session_id: str
    seq: int
    turn: int
    title: str
    now: int
    text: Callable[[str], str] = str

    def __post_init__(self) -> None:
        self.first = self.seq + 1

    def rows(self, items: Sequence[HistoryEntry]) -> Iterator[tuple[Any, ...]]:
        """One :data:`INSERT_ITEM` parameter tuple per item (InvalidItem on a bad one)."""
        text = self.text
        for index, item in enumerate(items):
            validate_item(item, index)
            self.seq += 1
            if not self.title and item.role == HISTORY_ROLE_USER and item.text.strip():
                self.title = make_title(item.text)
            values = item_values(item) if text is str else tuple(map(text, item_values(item)))
            yield (self.session_id, self.seq, self.turn, item.role, *values, self.now)
