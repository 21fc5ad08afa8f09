"""SPEC §8: what the dialect answers from the stored rows alone, no adapter involved.

``session/list`` pages through the sessions this connection's caller may
see (its principal's; every one for the operator; other principals' too with
a ``see-all`` grant) (ACP ``SessionInfo``: cwd, title, updatedAt, additionalDirectories, and in
``_meta.acpgate`` the agent, a spawned session's lineage, a fork's ``forkedFrom`` and the
stored token totals, ``usage``); an inbound ``session/update``
or ``session/event`` marks activity on one.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from services.common.protocol import META_ACPGATE
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import SessionRow
from services.edge.dialect.a2a.views import iso, lineage, state_of
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.visibility import reader_fields, visible_row
from services.edge.errors import service_error
from services.edge.params import first_str, session_id


async def session_list(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §8: every session this connection's principal may see, in ACP shape; each row's
    ``_meta.acpgate`` names its agent and, for a spawned session, ``parentSessionId`` and
    ``spawnedBy``, for a fork ``forkedFrom``."""
    cwd = first_str(params, "cwd") or ""
    if cwd:  # workspaces are stored as real paths; match a symlinked or relative filter too
        try:
            cwd = await asyncio.to_thread(os.path.realpath, cwd)
        except ValueError:  # e.g. an embedded NUL: no stored workspace can match
            return {"sessions": []}
    cursor = first_str(params, "cursor") or ""
    try:
        page = await conn.runtime.session_service.list_sessions(
            await reader_fields(conn.runtime, conn.caller), cwd=cwd, cursor=cursor)
    except ServiceError as exc:
        raise service_error(exc) from None
    sessions = [session_info(row) for row in page.rows]
    for info, row in zip(sessions, page.rows, strict=True):
        # Running here or elsewhere (the console's state column).
        live = conn.runtime.registry.active.get(row.session_id)
        info["_meta"][META_ACPGATE]["state"] = state_of(row, live)
    out: dict[str, Any] = {"sessions": sessions}
    if page.next_cursor:
        out["nextCursor"] = page.next_cursor
    return out


def session_info(row: SessionRow) -> dict[str, Any]:
    """One stored row as an ACP ``SessionInfo``; its ``_meta.acpgate`` names its agent,
    for a spawned session ``parentSessionId`` and ``spawnedBy``, for a fork ``forkedFrom``,
    and the token ``usage``."""
    info: dict[str, Any] = {"sessionId": row.session_id, "cwd": row.workspace_dir}
    if row.additional_directories:
        info["additionalDirectories"] = list(row.additional_directories)
    if row.title:
        info["title"] = row.title
    info["updatedAt"] = iso(row.last_activity or row.created_at)
    # One _meta.acpgate: who the session runs as and, for a spawned one, its lineage,
    # and its stored token totals.
    info["_meta"] = {META_ACPGATE: {**lineage(row), "usage": {
        "inputTokens": row.input_tokens, "outputTokens": row.output_tokens,
        "totalTokens": row.token_count}}}
    return info


async def session_event(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §8: inbound session/update or session/event touches the session."""
    sid = session_id(params)
    event_type = params.get("type")
    if not isinstance(event_type, str):
        update = params.get("update")
        event_type = update.get("sessionUpdate") if isinstance(update, dict) else None
        if not isinstance(event_type, str):
            event_type = "unknown"
    session = conn.sessions.get(sid)
    if session is not None:
        session.touch()
    else:
        await visible_row(conn.runtime, conn.caller, sid)  # another principal's: "not found"
    try:
        await conn.runtime.session_service.touch_session(sid)
    except ServiceError as exc:
        if session is None:  # service_error maps NOT_FOUND/PRECONDITION to -32000
            raise service_error(exc, sid) from None
    return {"sessionId": sid, "type": event_type, "status": "processed"}
