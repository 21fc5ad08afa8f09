"""The session tools' extension methods, as the edge serves them.

An adapter (the built-in agent's ``sessions_*`` tools) sends
``_acpgate/sessions_spawn``, ``…_list``, ``…_history``, ``…_send`` or
``_acpgate/session_status`` over its ACP connection. The requester is the
session whose adapter sent it — the edge knows it from the link the request
came on, never from the params — and every call goes to the session service
with that session's stored key as the requester, under the configured
``[sessions] visibility`` and ``[a2a]`` policy. A session the requester may not
see answers -32000 ``Session not found: <id>``, exactly like a missing one.

Params: ``targetSessionId`` names the other session (``sessionId`` is the
caller's, as in every agent→client request). Results are JSON objects for the
model; refusals are JSON-RPC errors with the message the model reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    INVALID_PARAMS,
    M_A2A_HISTORY,
    M_A2A_LIST,
    M_A2A_SEND,
    M_A2A_SPAWN,
    M_A2A_STATUS,
)
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import Reader, SessionRow
from services.edge.dialect.a2a import runner
from services.edge.dialect.a2a.views import history_view, iso, row_view, session_id_of_key, state_of
from services.edge.errors import not_found, service_error
from services.edge.params import MAX_SESSION_ID_CHARS, first_str
from services.edge.sessions.session import AdapterMethod, EdgeSession

__all__ = ["A2A_ADAPTER_METHODS", "MAX_LIST_ROWS"]

#: Rows one sessions_list returns at most; history items likewise.
MAX_LIST_ROWS = 100
MAX_HISTORY_ITEMS = 500


def _text(params: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = first_str(params, key)
    if required and not (value or "").strip():
        raise JsonRpcError(INVALID_PARAMS, f"Missing required parameter: {key}")
    return value or ""


def _target(params: dict[str, Any]) -> str:
    sid = _text(params, "targetSessionId", required=True).strip()
    if len(sid) > MAX_SESSION_ID_CHARS:  # cannot name a session; never sent to the services
        raise not_found(sid)
    return sid


def _bool(params: dict[str, Any], key: str, default: bool) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise JsonRpcError(INVALID_PARAMS, f"Parameter '{key}' must be true or false")
    return value


def _int(params: dict[str, Any], key: str, default: int, hi: int) -> int:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JsonRpcError(INVALID_PARAMS, f"Parameter '{key}' must be an integer")
    return max(1, min(hi, value))


async def sessions_spawn(requester: EdgeSession, params: dict[str, Any]) -> dict[str, Any]:
    """A child session and (unless ``wait`` is false) its first turn's reply."""
    return await runner.spawn(requester, runner.SpawnArgs(
        agent=_text(params, "agent", required=True).strip(),
        prompt=_text(params, "prompt", required=True),
        cwd=_text(params, "cwd"), label=_text(params, "label"),
        wait=_bool(params, "wait", True)))


async def _reader(requester: EdgeSession) -> Reader:
    """Who a session tool reads as: the requesting session, with its principal's
    ``see-all`` grant looked up now."""
    return Reader(requester_session_key=requester.store_key,
                  see_all_principals=await requester.runtime.sees_all(requester.principal))


async def sessions_send(requester: EdgeSession, params: dict[str, Any]) -> dict[str, Any]:
    """``message`` as a turn of the target (unless ``wait`` is false, its reply)."""
    return await runner.send(requester, _target(params), _text(params, "message", required=True),
                             _bool(params, "wait", True))


async def sessions_list(requester: EdgeSession, params: dict[str, Any]) -> dict[str, Any]:
    """The sessions the requester may list, newest activity first."""
    rt = requester.runtime
    try:
        page = await rt.session_service.list_sessions(
            await _reader(requester), query=_text(params, "filter"),
            limit=_int(params, "limit", 20, MAX_LIST_ROWS))
    except ServiceError as exc:
        raise service_error(exc) from None
    rows = [row_view(r, rt.registry.active.get(r.session_id), requester.store_key)
            for r in page.rows]
    return {"sessions": rows, "more": bool(page.next_cursor)}


async def sessions_history(requester: EdgeSession, params: dict[str, Any]) -> dict[str, Any]:
    """The newest stored items of a session the requester may read."""
    sid = _target(params)
    rt = requester.runtime
    if (live := rt.registry.active.get(sid)) is not None:
        await live.history_settled()
    pages = rt.session_service.get_history(sid, await _reader(requester),
                                           _int(params, "limit", 20, MAX_HISTORY_ITEMS))
    try:
        items = [item async for page in pages for item in page]
    except ServiceError as exc:
        raise service_error(exc, sid) from None
    return {"sessionId": sid, "items": history_view(items)}


async def session_status(requester: EdgeSession, params: dict[str, Any]) -> dict[str, Any]:
    """State, busy, last activity, agent, owner, lineage and lease state of a session."""
    rt = requester.runtime
    sid = _target(params)
    try:
        got = await rt.session_service.session_status(sid, await _reader(requester))
    except ServiceError as exc:
        raise service_error(exc, sid) from None
    row = got.session
    live = rt.registry.active.get(sid)
    status: dict[str, Any] = {
        "sessionId": sid, "agent": row.agent_alias, "state": state_of(row, live),
        "busy": live is not None and live.turn is not None,
        "lastActivity": iso(row.last_activity or row.created_at),
        "owner": row.ownership.owner_session_key,
        "messageCount": got.message_count, "tokens": row.token_count,
        "leaseState": await _lease_state(requester, row, live),
    }
    parent = session_id_of_key(row.ownership.parent_session_key)
    if parent:
        status["parentSessionId"] = parent
        status["spawnedBy"] = row.ownership.spawned_by
    if row.title:
        status["title"] = row.title
    return status


async def _lease_state(requester: EdgeSession, row: SessionRow,
                       live: EdgeSession | None) -> str:
    """The state of the session's newest lease on this host (open, closing, closed, lost;
    "none" when it has none here)."""
    key = live.session_key if live is not None else row.ownership.session_key
    try:
        found = await requester.runtime.lifecycle.list_leases(session_key=key)
    except ServiceError:
        return "unknown"
    leases = sorted(found, key=lambda lease: (lease.lease_id == row.lease_id, lease.started_at))
    if not leases:
        return "none"
    return leases[-1].state.value


#: The adapter requests the edge serves for the session tools.
A2A_ADAPTER_METHODS: Mapping[str, AdapterMethod] = {
    M_A2A_SPAWN: sessions_spawn,
    M_A2A_LIST: sessions_list,
    M_A2A_HISTORY: sessions_history,
    M_A2A_SEND: sessions_send,
    M_A2A_STATUS: session_status,
}
