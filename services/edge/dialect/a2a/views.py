"""How sessions look to a requesting agent and in session/list.

The rows come from the session service's visibility-filtered reads; this module
only shapes them: the session tools' JSON views (one row, its status, its
history) and the ``_meta.acpgate`` lineage every session/list row carries
(``parentSessionId``, ``spawnedBy``, ``subagent``, ``agent``).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from services.common.protocol import (
    META_AGENT,
    META_FORKED_FROM,
    META_PARENT_SESSION_ID,
    META_SPAWNED_BY,
    META_SUBAGENT,
)
from services.edge.backends.session_types import SESSION_ACTIVE, HistoryItem, SessionRow
from services.edge.sessions.history_wire import history_meta
from services.edge.sessions.session import EdgeSession

__all__ = ["MAX_TEXT_CHARS", "history_view", "iso", "lineage", "row_view", "session_id_of_key",
           "state_of"]

#: Characters of one history text or tool output a requesting model gets at most.
MAX_TEXT_CHARS = 4000
_KEY_MARK = ":acp:"


def iso(ms: int) -> str:
    """Milliseconds since the epoch as an RFC 3339 UTC timestamp (ACP ``updatedAt``)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")


def session_id_of_key(key: str) -> str:
    """The session id in a SPEC §13 key ``agent:<alias>:acp:<sessionId>`` ("" for others)."""
    return key.rsplit(_KEY_MARK, 1)[1] if key.startswith("agent:") and _KEY_MARK in key else ""


def lineage(row: SessionRow) -> dict[str, Any]:
    """``_meta.acpgate`` of a session/list row: its agent, for a spawned session its
    parent's id and the key of the session that spawned it (and ``subagent: true`` for a
    child session its agent runs), for a fork the id of the session it was forked from."""
    out: dict[str, Any] = {META_AGENT: row.agent_alias}
    if row.forked_from:
        out[META_FORKED_FROM] = row.forked_from
    parent = session_id_of_key(row.ownership.parent_session_key)
    if parent:
        out[META_PARENT_SESSION_ID] = parent
    if row.ownership.spawned_by:
        out[META_SPAWNED_BY] = row.ownership.spawned_by
    if row.subagent:
        out[META_SUBAGENT] = True
    return out


def state_of(row: SessionRow, live: EdgeSession | None) -> str:
    """active (a turn runs), idle (running, no turn) or closed (no adapter runs it).

    A session another host serves (its claim is live there) counts as active.
    """
    if live is not None and not live.released:
        return "active" if live.turn is not None else "idle"
    if row.state == SESSION_ACTIVE and row.claim.instance_id \
            and row.claim.until >= int(time.time() * 1000):
        return "active"
    return "closed"


def row_view(row: SessionRow, live: EdgeSession | None,
             requester_key: str) -> dict[str, Any]:
    """One session as the session tools show it."""
    view: dict[str, Any] = {"sessionId": row.session_id, "agent": row.agent_alias}
    if row.title:
        view["title"] = row.title
    view["cwd"] = row.workspace_dir
    view["state"] = state_of(row, live)
    view["updatedAt"] = iso(row.last_activity or row.created_at)
    parent = session_id_of_key(row.ownership.parent_session_key)
    if parent:
        view["parentSessionId"] = parent
        view["spawnedByYou"] = row.ownership.spawned_by == requester_key
    if row.ownership.session_key == requester_key:
        view["you"] = True
    return view


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:MAX_TEXT_CHARS]}… [{len(text) - MAX_TEXT_CHARS} more characters]"


def history_view(items: list[HistoryItem]) -> list[dict[str, Any]]:
    """Stored items as the requesting model reads them (long texts cut, with a note)."""
    out = history_meta(items)
    for entry in out:
        for key in ("text", "output"):
            if isinstance(entry.get(key), str):
                entry[key] = _cut(entry[key])
    return out
