"""A session live on another host or edge worker: where to attach it (across hosts).

Several hosts (or edge workers) may share one store; a session is live where its
adapter runs, on the host whose claim the row holds (the claim identity this edge's
``HostClaims`` takes: the gateway instance id, or an edge worker's own name). An edge does not relay a client
to another host's session: ``session/attach`` of a session of the caller's own that
another host serves (a live claim that is not this edge's) answers
:data:`~services.common.protocol.SESSION_LIVE_ELSEWHERE` (-32007) with
``data.acpgate.liveAt``: that host's name, gateway instance id and public URL (its
``[gateway] public_url``, when it has one), as the row's claim records them; the message
says "reconnect to <url>" — the client connects there and attaches. The URL comes only
from the claiming edge's configuration, sent under the service credential: nothing a
client sends reaches it. Without one the answer says so, and names no guessed address.
A ``session/load``/``resume`` there keeps SPEC §8's -32602 "Session already active",
with the same ``data.acpgate.liveAt`` added (:func:`with_live_at`).

A session of the caller's own that nobody serves — stored, its last connection's grace
over or acpgate restarted since — answers ``session/attach`` with
:data:`~services.common.protocol.SESSION_NOT_RUNNING` (-32008) saying how to bring
it back (:func:`stored_not_running`). Anyone else's session answers as an unknown one.
"""

from __future__ import annotations

import time

from services.common.attach_protocol import (
    MSG_ATTACH_ON_SIBLING_WORKER,
    MSG_LIVE_ELSEWHERE_NO_URL,
    MSG_LIVE_ELSEWHERE_RECONNECT,
    MSG_SESSION_LIVE_ELSEWHERE,
    MSG_SESSION_NOT_RUNNING,
    RESTORE_METHODS,
)
from services.common.jsonrpc import JsonRpcError
from services.common.principals import principal_of_owner
from services.common.protocol import (
    INVALID_PARAMS,
    META_ACPGATE,
    META_LIVE_AT,
    SESSION_LIVE_ELSEWHERE,
    SESSION_NOT_RUNNING,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.visibility import visible_row
from services.edge.sessions.sibling import sibling_where
from services.edge.sessions.worker_link import split_worker_name

__all__ = ["live_elsewhere", "stored_not_running", "with_live_at"]


async def live_elsewhere(conn: DialectConnection, sid: str) -> None:
    """Raise -32007 naming where ``sid`` is live when another host serves it for the
    caller's own principal; return otherwise (module doc)."""
    found = await _where(conn, sid)
    if found is not None:
        where, message = found
        raise JsonRpcError(SESSION_LIVE_ELSEWHERE, message, {META_ACPGATE: {META_LIVE_AT: where}})


async def stored_not_running(conn: DialectConnection, sid: str) -> None:
    """Raise -32008 when ``sid`` is a stored session of the caller's own that runs nowhere
    (no live claim; :func:`live_elsewhere` answered for one that runs on another host);
    return otherwise."""
    rt = conn.runtime
    if not rt.persistent:
        return
    try:
        row = await visible_row(rt, conn.caller, sid)
    except JsonRpcError:
        return
    if principal_of_owner(row.ownership.owner_session_key) != conn.caller.principal:
        return
    raise JsonRpcError(SESSION_NOT_RUNNING, MSG_SESSION_NOT_RUNNING.format(session_id=sid), {
        "sessionId": sid, META_ACPGATE: {"stored": True, "restoreWith": list(RESTORE_METHODS)}})


async def with_live_at(conn: object, sid: str, refused: JsonRpcError) -> JsonRpcError:
    """``refused`` — a load/resume's SPEC §8 "Session already active" because another host
    holds the claim — with ``data.acpgate.liveAt`` added when that host serves the caller's
    own session, so the client knows where to attach it (code and message unchanged)."""
    if refused.code != INVALID_PARAMS or refused.data is not None \
            or not isinstance(conn, DialectConnection):
        return refused
    found = await _where(conn, sid)
    if found is None:
        return refused
    return JsonRpcError(refused.code, refused.message, {META_ACPGATE: {META_LIVE_AT: found[0]}})


async def _where(conn: DialectConnection, sid: str) -> tuple[dict[str, object], str] | None:
    """Where ``sid`` is live, and the message telling the client what to do, when another
    host (or edge worker) serves it for the caller's own principal; None otherwise."""
    rt = conn.runtime
    if not rt.persistent:
        return None
    try:
        row = await visible_row(rt, conn.caller, sid)
    except JsonRpcError:
        return None
    claim = row.claim
    if not claim.instance_id or claim.instance_id == rt.claims.instance_id \
            or claim.until < int(time.time() * 1000) \
            or principal_of_owner(row.ownership.owner_session_key) != conn.caller.principal:
        return None
    here, _ = split_worker_name(rt.claims.instance_id)
    there, worker = split_worker_name(claim.instance_id)
    if worker and there == here:  # a sibling edge worker of this host
        return sibling_where(claim, worker), MSG_ATTACH_ON_SIBLING_WORKER.format(
            session_id=sid, worker=worker)
    where: dict[str, object] = {"host": claim.host, "instanceId": claim.instance_id}
    then = MSG_LIVE_ELSEWHERE_NO_URL
    if claim.public_url:
        where["url"] = claim.public_url
        then = MSG_LIVE_ELSEWHERE_RECONNECT.format(url=claim.public_url)
    return where, MSG_SESSION_LIVE_ELSEWHERE.format(session_id=sid, host=claim.host, then=then)
