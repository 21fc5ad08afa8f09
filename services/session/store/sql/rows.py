"""What the SQL backends share: column lists, row → record, the update and turn builders.

SQLite and PostgreSQL store the same tables with the same column names, so the
statements and the row decoding are written once, with ``?`` placeholders;
the PostgreSQL store numbers them (``$1``, ``$2``…) with :func:`numbered`.
What differs — ``MAX`` versus ``GREATEST``, locking, transactions — stays in
each backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Protocol

from services.common.protocol import HISTORY_ROLE_USER
from services.session.store.checks import (
    check_claim,
    check_new_session,
    validate_item,
)
from services.session.store.records import (
    BACKEND,
    ITEM_FIELDS,
    Claim,
    HistoryEntry,
    NewSession,
    Ownership,
    SessionRecord,
    TurnUsage,
    item_values,
    make_title,
    prompt_title,
    session_key_for,
)

__all__ = [
    "ADD_OWNER_BYTES",
    "DELETE_SESSION_DATA",
    "HISTORY_COLUMNS",
    "INSERT_ITEM",
    "INSERT_SESSION",
    "INSERT_USAGE",
    "LIST_PAGE",
    "SELECT_BY_SESSION_KEY",
    "SELECT_CAPABILITIES",
    "SELECT_SESSION",
    "SELECT_TURN_COUNTERS",
    "SESSION_COLUMNS",
    "SUB_OWNER_BYTES",
    "TOUCH_SESSION",
    "UPDATE_AFTER_TURN",
    "UPSERT_CAPABILITIES",
    "Row",
    "TurnRows",
    "TurnTarget",
    "dirs_from_json",
    "dirs_json",
    "list_filter",
    "new_row_values",
    "numbered",
    "record_from_row",
    "turn_target",
    "update_assignments",
    "usage_values",
]

SESSION_COLUMNS: Final = (
    "id, agent_alias, workspace_dir, created_at, last_activity, token_count, plan_json, state,"
    " lease_id, adapter_session_id, title, session_key, spawned_by, parent_session_key,"
    " owner_session_key, agent_id, backend, gateway_instance_id, owner_created_at, last_seq,"
    " mcp_servers_json, active_instance_id, active_host, active_until, additional_dirs_json,"
    " mode_id, config_json, input_tokens, output_tokens, claim_generation, stored_bytes,"
    " forked_from, active_url, subagent, protocol_version"
)
#: Every HistoryEntry field in declaration order: a history row is ``HistoryEntry(*row)``.
HISTORY_COLUMNS: Final = ", ".join(f.name for f in fields(HistoryEntry))
INSERT_ITEM: Final = (
    f"INSERT INTO history (session_id, seq, turn, role, {', '.join(ITEM_FIELDS)}, created_at)"
    f" VALUES (?, ?, ?, ?, {', '.join(['?'] * len(ITEM_FIELDS))}, ?)"
)
#: A new row, titled and claimed as asked (:func:`new_row_values` gives the parameters):
#: one statement, so a claimed row costs one transaction, not an insert and a claim.
INSERT_SESSION: Final = (
    "INSERT INTO sessions (id, agent_alias, workspace_dir, created_at, last_activity, state,"
    " session_key, spawned_by, parent_session_key, owner_session_key, agent_id, backend,"
    " gateway_instance_id, owner_created_at, mcp_servers_json, additional_dirs_json, title,"
    " active_instance_id, active_host, active_until, claim_generation, active_url, subagent)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: The row's counters, title, totals, stored bytes and plan after a turn; ``{greatest}`` is
#: the backend's two-argument maximum (SQLite ``MAX``, PostgreSQL ``GREATEST``).
UPDATE_AFTER_TURN: Final = (
    "UPDATE sessions SET last_seq = ?, last_turn = ?, title = ?, token_count = token_count + ?,"
    " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
    " last_activity = {greatest}(last_activity, ?), plan_json = COALESCE(?, plan_json),"
    " stored_bytes = stored_bytes + ? WHERE id = ?"
)
#: Add ``?`` bytes to owner ``?``'s running total (a new owner starts at them); the total
#: after. Parameters: owner, bytes. The row lock serializes an owner's concurrent turns.
ADD_OWNER_BYTES: Final = (
    "INSERT INTO owner_usage (owner_session_key, stored_bytes) VALUES (?, ?)"
    " ON CONFLICT (owner_session_key) DO UPDATE"
    " SET stored_bytes = owner_usage.stored_bytes + excluded.stored_bytes"
    " RETURNING stored_bytes"
)
#: Take a deleted row's bytes ``?`` off owner ``?``'s total (never below 0); ``{greatest}``
#: as above. Parameters: bytes, owner.
SUB_OWNER_BYTES: Final = (
    "UPDATE owner_usage SET stored_bytes = {greatest}(0, stored_bytes - ?)"
    " WHERE owner_session_key = ?"
)
#: The usage of one turn (:func:`usage_values` gives the parameters).
INSERT_USAGE: Final = (
    "INSERT INTO turn_usage (session_id, turn, input_tokens, output_tokens, thought_tokens,"
    " cached_read_tokens, cached_write_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
#: What goes with a deleted row (parameter: the session id). Explicit rather than left
#: to the cascades, so it holds whether or not a connection enforces foreign keys.
DELETE_SESSION_DATA: Final = (
    "DELETE FROM history WHERE session_id = ?",
    "DELETE FROM turn_usage WHERE session_id = ?",
    "DELETE FROM event_chunks WHERE session_id = ?",
    "DELETE FROM turns WHERE session_id = ?",
)
#: Record alias ``?``'s adapter capabilities ``?`` at time ``?``, replacing what was there.
UPSERT_CAPABILITIES: Final = (
    "INSERT INTO agent_capabilities (alias, capabilities_json, recorded_at) VALUES (?, ?, ?)"
    " ON CONFLICT (alias) DO UPDATE SET capabilities_json = excluded.capabilities_json,"
    " recorded_at = excluded.recorded_at"
)
SELECT_CAPABILITIES: Final = "SELECT capabilities_json FROM agent_capabilities WHERE alias = ?"
SELECT_SESSION: Final = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
SELECT_BY_SESSION_KEY: Final = (
    f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_key = ? LIMIT 1")
#: A page of rows; ``{where}`` is :func:`list_filter`'s clause, the last parameter the limit.
LIST_PAGE: Final = (
    f"SELECT {SESSION_COLUMNS} FROM sessions {{where}}"
    " ORDER BY last_activity DESC, id DESC LIMIT ?"
)
#: The counters and title a turn is numbered after, and what admits it — the claim (fence)
#: and the bytes stored for the session and its owner (quotas); PostgreSQL adds ``FOR
#: UPDATE``. Read back with :func:`turn_state`.
SELECT_TURN_COUNTERS: Final = (
    "SELECT last_seq, last_turn, title, active_instance_id, active_host, active_until,"
    " claim_generation, stored_bytes, owner_session_key FROM sessions WHERE id = ?"
)
#: Bump row ``?``'s last_activity to ``?`` (now), never backwards; parameters: now, id.
TOUCH_SESSION: Final = (
    "UPDATE sessions SET last_activity = {greatest}(last_activity, ?) WHERE id = ?")


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
        claim=Claim(instance_id=r[21], host=r[22], until=int(r[23]), generation=int(r[29]),
                    public_url=r[32]),
        additional_directories=dirs_from_json(r[24]),
        mode_id=r[25],
        config_json=r[26],
        input_tokens=int(r[27]),
        output_tokens=int(r[28]),
        stored_bytes=int(r[30]),
        forked_from=r[31],
        subagent=bool(r[33]),
        protocol_version=int(r[34]),
    )


def new_row_values(new: NewSession, now: int, *,
                   text: Callable[[str], str] = str) -> tuple[Any, ...]:
    """The :data:`INSERT_SESSION` parameters of the row ``new`` describes, written at
    ``now`` (InvalidItem for a row :func:`~.checks.check_new_session` or a claim
    :func:`~.checks.check_claim` refuses); ``text`` encodes the title."""
    check_new_session(new.session_id, new.agent_alias, new.workspace_dir, new.state,
                      new.spawned_by, new.parent_session_key, new.owner_session_key,
                      new.gateway_instance_id, mcp_servers_json=new.mcp_servers_json,
                      additional_directories=new.additional_directories)
    claim: tuple[str, str, int, int, str] = ("", "", 0, 0, "")
    if new.claim_ttl_ms is not None:
        check_claim(new.gateway_instance_id, new.host, new.claim_ttl_ms, new.public_url)
        # Its first generation.
        claim = (new.gateway_instance_id, new.host, now + new.claim_ttl_ms, 1, new.public_url)
    key = session_key_for(new.agent_alias, new.session_id)
    owner = new.owner_session_key or new.spawned_by or key
    title = text(make_title(new.title)) if new.title.strip() else ""
    return (new.session_id, new.agent_alias, new.workspace_dir, now, now, new.state, key,
            new.spawned_by, new.parent_session_key, owner, new.agent_alias, BACKEND,
            new.gateway_instance_id, now, new.mcp_servers_json,
            dirs_json(new.additional_directories), title, *claim, int(new.subagent))


def dirs_json(directories: Sequence[str]) -> str:
    """A session's additional directories as stored: a JSON array of strings."""
    return json.dumps(list(directories))


def dirs_from_json(text: str) -> tuple[str, ...]:
    """The stored additional directories (a JSON array of strings; anything else: none)."""
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def usage_values(session_id: str, turn: int, usage: TurnUsage, now: int) -> tuple[Any, ...]:
    """The :data:`INSERT_USAGE` parameters of one turn's usage."""
    return (session_id, turn, usage.input_tokens, usage.output_tokens, usage.thought_tokens,
            usage.cached_read_tokens, usage.cached_write_tokens, now)


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
    mode_id: str | None = None,
    config_json: str | None = None,
    additional_directories: Sequence[str] | None = None,
    protocol_version: int | None = None,
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
        ("mode_id", mode_id),
        ("config_json", config_json),
        ("additional_dirs_json",
         None if additional_directories is None else dirs_json(additional_directories)),
        ("protocol_version", protocol_version),
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


def list_filter(cwd: str, after: tuple[int, str] | None,
                live_at: int = 0) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause ("" for none) of a list page: one workspace, after a position in
    (last_activity DESC, id DESC) order; with ``live_at``, only rows an instance's claim
    holds at that time (ms)."""
    where: list[str] = []
    params: list[Any] = []
    if live_at:
        where.append("active_instance_id != '' AND active_until >= ?")
        params.append(live_at)
    if cwd:
        where.append("workspace_dir = ?")
        params.append(cwd)
    if after is not None:
        where.append("(last_activity < ? OR (last_activity = ? AND id < ?))")
        params += [after[0], after[0], after[1]]
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


@dataclass(frozen=True)
class TurnTarget:
    """The row a turn goes to, as :data:`SELECT_TURN_COUNTERS` reads it (locked)."""

    last_seq: int
    last_turn: int
    title: str
    claim: Claim
    stored_bytes: int
    owner: str


def turn_target(r: Row, text: Callable[[str], str] = str) -> TurnTarget:
    """A :data:`SELECT_TURN_COUNTERS` row (``text`` decodes the stored title)."""
    return TurnTarget(int(r[0]), int(r[1]), text(r[2]),
                      Claim(instance_id=r[3], host=r[4], until=int(r[5]), generation=int(r[6])),
                      int(r[7]), r[8])


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
                self.title = prompt_title(item.text)
            values = item_values(item) if text is str else tuple(map(text, item_values(item)))
            yield (self.session_id, self.seq, self.turn, item.role, *values, self.now)
