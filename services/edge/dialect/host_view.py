"""The host view over ACP: ``_acpgate/host/ps``, ``…/cancel``, ``…/close``.

The web console's host page is a client of ``/acp`` like any other, so what
``acpgate ps`` shows reaches it as ACP extension methods. They are answered
only for a caller who may see the whole install: a gateway token holding the
``host`` grant (``acpgate token create --admin``; read per call, so a revoked
grant counts at once) or the local operator (stdio, a gateway without auth).
Anyone else gets the one refusal :data:`~services.common.protocol.MSG_HOST_REFUSED`
before the params are even read — whatever they name, they learn nothing.

``ps`` is gathered from the services' own RPCs, as ``acpgate ps`` does: the live
sessions with what their edges last reported (``ListLiveSessions``), the live
leases (``ListLeases``) and each one's verified process tree with memory and CPU
(``VerifyOwnedTree``). This edge adds what only it knows of its own sessions:
whether a client is attached (a detached one waits for its owner to come back).
``cancel`` and ``close`` act on a session this edge serves, whoever's
connection it is on: cancel as the owner's ``session/cancel`` would, close as
``session/close`` (the turn cancelled, the adapter released, the row kept).
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.principals import owner_label
from services.common.protocol import (
    AUTH_REQUIRED,
    M_HOST_CANCEL,
    MSG_HOST_ELSEWHERE,
    MSG_HOST_REFUSED,
)
from services.edge.backends.errors import ServiceError
from services.edge.backends.lifecycle import Lease, LeaseState
from services.edge.backends.session_types import (
    ACTIVITY_IDLE,
    ACTIVITY_SETTING_UP,
    ACTIVITY_TURN,
    ACTIVITY_WAITING,
    LiveSession,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.errors import not_found, service_error
from services.edge.params import MAX_SESSION_ID_CHARS, session_id
from services.edge.sessions.activity import activity_of
from services.edge.sessions.session import EdgeSession
from services.edge.tokens import GRANT_HOST, TokenStore

__all__ = ["host_cancel", "host_close", "host_ps"]

_LIVE_LEASES = (LeaseState.OPEN, LeaseState.CLOSING, LeaseState.WARM)
_ACTIVITY = {ACTIVITY_SETTING_UP: "setting-up", ACTIVITY_IDLE: "idle",
             ACTIVITY_TURN: "turn", ACTIVITY_WAITING: "waiting"}
#: Seconds each service call of ``ps`` may take.
_CALL_SECS = 5.0
#: Leases verified at once (each one reads the process table).
_VERIFY_AT_ONCE = 8


def _token_facts(store: TokenStore, token_id: str) -> tuple[bool, dict[str, str]]:
    """Whether ``token_id`` (active) holds the host grant, and every token's label."""
    names = {t.token_id: t.name for t in store.list()}
    return GRANT_HOST in store.grants_of(token_id), names


async def _admitted(conn: DialectConnection) -> dict[str, str]:
    """Token id → label when the caller may use the host view, else the refusal."""
    caller = conn.caller
    store = TokenStore(conn.runtime.cfg.token_db_path)
    try:
        allowed, names = await asyncio.to_thread(_token_facts, store, caller.token_id)
    except sqlite3.Error:  # an unreadable store grants nothing (and names nobody)
        allowed, names = False, {}
    if caller.operator or (caller.token_id and allowed):
        return names
    raise JsonRpcError(AUTH_REQUIRED, MSG_HOST_REFUSED)


async def _processes(conn: DialectConnection, lease: Lease) -> dict[str, Any]:
    view: dict[str, Any] = {"leaseId": lease.lease_id,
                            "state": lease.state.value if lease.state in _LIVE_LEASES else "?",
                            "processes": []}
    try:
        tree = await conn.runtime.lifecycle.verify_owned_tree(
            lease.lease_id, with_usage=True, wait_secs=_CALL_SECS)
    except ServiceError as exc:
        view["why"] = exc.detail or exc.code
        return view
    view["verified"] = tree.verified
    for p in sorted(tree.processes, key=lambda p: (p.depth, p.pid)):
        role = "wrapper" if p.depth == 0 else (
            "adapter" if p.pid == lease.adapter_pid else "child")
        view["processes"].append({"pid": p.pid, "role": role, "rssBytes": p.rss_bytes,
                                  "cpuSeconds": round(p.cpu_seconds, 2),
                                  "command": " ".join(p.cmdline)})
    return view


def _session_view(live: LiveSession, names: dict[str, str],
                  here: EdgeSession | None) -> dict[str, Any]:
    row = live.session
    # What this edge serves it knows now; of another process's, its last report.
    activity = activity_of(here) if here is not None else live.activity
    state = "detached" if activity.detached else _ACTIVITY.get(activity.state, "unknown")
    detached = activity.detached
    return {"sessionId": row.session_id, "title": row.title, "agent": row.agent_alias,
            "owner": owner_label(row.ownership.owner_session_key, names), "state": state,
            "waitingRequests": activity.waiting_requests,
            "attachedClients": 0 if detached else max(1, activity.attached_clients),
            "createdAt": row.created_at,
            "lastActivity": activity.last_activity or row.last_activity,
            "servedHere": here is not None,
            "leaseId": activity.lease_id or live.activity.lease_id or row.lease_id,
            "usage": {"inputTokens": row.input_tokens, "outputTokens": row.output_tokens}}


async def host_ps(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """``_acpgate/host/ps``: the install's live sessions and leases with their processes."""
    names = await _admitted(conn)
    rt = conn.runtime
    try:
        live, leases = await asyncio.gather(
            rt.session_service.list_live_sessions(deadline_secs=_CALL_SECS),
            rt.lifecycle.list_leases(wait_secs=_CALL_SECS))
    except ServiceError as exc:
        raise service_error(exc) from None
    gate = asyncio.Semaphore(_VERIFY_AT_ONCE)

    async def verified(lease: Lease) -> dict[str, Any]:
        async with gate:
            return await _processes(conn, lease)
    wanted = [x for x in leases if x.state in _LIVE_LEASES]
    trees = {v["leaseId"]: v for v in await asyncio.gather(*map(verified, wanted))}
    sessions: dict[str, dict[str, Any]] = {}
    for entry in sorted(live, key=lambda e: e.reported_at):  # freshest report wins
        sid = entry.session.session_id
        sessions[sid] = _session_view(entry, names, rt.registry.active.get(sid))
    for view in sessions.values():
        view["lease"] = trees.get(view.pop("leaseId"))
    return {"sessions": sorted(sessions.values(), key=lambda v: v["createdAt"]),
            "leases": [trees[x.lease_id] | {"warm": x.state is LeaseState.WARM}
                       for x in wanted]}


async def _served_here(conn: DialectConnection, params: dict[str, Any]) -> EdgeSession:
    await _admitted(conn)
    sid = session_id(params)
    if len(sid) > MAX_SESSION_ID_CHARS:
        raise not_found(sid)
    session = conn.runtime.registry.active.get(sid)
    if session is not None and not session.released:
        return session
    try:
        live = await conn.runtime.session_service.list_live_sessions(deadline_secs=_CALL_SECS)
    except ServiceError as exc:
        raise service_error(exc) from None
    if any(e.session.session_id == sid for e in live):
        raise JsonRpcError(AUTH_REQUIRED, MSG_HOST_ELSEWHERE.format(session_id=sid))
    raise not_found(sid)


async def host_cancel(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """``_acpgate/host/cancel``: cancel the running turn of a session this edge serves."""
    session = await _served_here(conn, params)
    return {"cancelled": session.cancel(asked_by=M_HOST_CANCEL)}


async def host_close(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """``_acpgate/host/close``: close a session this edge serves (its row kept), as its
    owner's ``session/close`` would; the owner's connection finds it gone."""
    session = await _served_here(conn, params)
    rt = conn.runtime
    rt.remove(session)
    session.cancel()
    await session.wait_turn()
    await rt.release(session, "host_close")
    return {}

