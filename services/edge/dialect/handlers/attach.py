"""``session/attach`` and ``session/detach`` (multi-client attach RFD).

A connection attaches a *live* session of its own principal — exactly the token
that owns it, whatever ``[sessions] visibility`` or an operator grant says: any other
caller, and any id that is not live on this edge, gets the very answer of an unknown
session (one live on another host or edge worker answers where it lives, and one stored
but running nowhere how to restore it: :mod:`services.edge.dialect.handlers.elsewhere`).
Attaching takes no slot of the token's share: the session has its slot already.

``role``: ``controller`` (default; prompts, cancels, answers permission requests — the
first answer among the controllers wins) or ``observer`` (watches only: every method
naming the session but those the method table lets an observer call is refused -32006 —
:meth:`DialectConnection.refuse_observer` — and it is never asked a permission request).
``historyPolicy``: ``full`` (default), ``pending_only``, ``none`` or ``after_message``
with ``afterMessageId`` (a message id, or the ``_meta.acpgate.eventId`` of the last
update the client saw); see :mod:`services.edge.sessions.joining`. The replay comes as
``session/update`` notifications before the answer, the live tail after it.

A connection attached already (it holds the session, or attached it before) attaches it
again the same way — to change its role, or for a replay after a point: the new
attachment replaces the old one at once, the session and a permission request pending on
the connection stay (:mod:`services.edge.sessions.joining`).

``session/detach`` leaves a session without ending it: an attachment is closed; the
session's holder hands it to another controller, or detaches it for ``[gateway]
detach_grace_secs`` (released at once where there is no grace: stdio).
"""

from __future__ import annotations

from typing import Any

from services.common.attach_protocol import (
    ATTACH_ROLES,
    HISTORY_AFTER_MESSAGE,
    HISTORY_FULL,
    HISTORY_POLICIES,
    MSG_AFTER_MESSAGE_REQUIRED,
    MSG_BAD_HISTORY_POLICY,
    MSG_BAD_ROLE,
    MSG_NOT_ATTACHED,
    MSG_ONLY_CONTROLLER,
    ROLE_CONTROLLER,
    ROLE_OBSERVER,
)
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    INVALID_PARAMS,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.elsewhere import live_elsewhere, stored_not_running
from services.edge.dialect.handlers.restore import replay_history
from services.edge.errors import not_found
from services.edge.params import session_id
from services.edge.sessions.clients import Attachment, conn_of, leave
from services.edge.sessions.hosted_port import HostedPort
from services.edge.sessions.joining import join, may_rejoin
from services.edge.sessions.prompt_result import setup_result
from services.edge.sessions.session import EdgeSession


async def session_attach(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """Attach a live session of the caller's own to this connection (module doc)."""
    sid = session_id(params)
    role = params.get("role", ROLE_CONTROLLER)
    if role not in ATTACH_ROLES:
        raise JsonRpcError(INVALID_PARAMS, MSG_BAD_ROLE.format(roles=", ".join(ATTACH_ROLES)))
    policy = params.get("historyPolicy", HISTORY_FULL)
    if policy not in HISTORY_POLICIES:
        raise JsonRpcError(INVALID_PARAMS, MSG_BAD_HISTORY_POLICY.format(
            policies=", ".join(HISTORY_POLICIES)))
    after = params.get("afterMessageId")
    if policy == HISTORY_AFTER_MESSAGE and (
            isinstance(after, bool) or not isinstance(after, str | int) or after == ""):
        raise JsonRpcError(INVALID_PARAMS, MSG_AFTER_MESSAGE_REQUIRED)
    session = own_live_session(conn, sid)
    if session is None:
        await live_elsewhere(conn, sid)
        await stored_not_running(conn, sid)
        raise not_found(sid)
    # Attached here already: joined again, the new role and replay replacing the old
    # attachment in one step (services.edge.sessions.joining).
    if not may_rejoin(session, conn, str(role)):
        raise JsonRpcError(INVALID_PARAMS, MSG_ONLY_CONTROLLER.format(session_id=sid))
    session.confirmed = True  # the client names it: it knows the session
    conn.forget_session(sid)
    if role == ROLE_OBSERVER:
        conn.observing[sid] = session
    else:
        conn.sessions[sid] = session
    try:
        applied = await join(session, conn, role=str(role), policy=str(policy), after=after,
                             send_history=lambda: replay_history(conn, session))
    except BaseException:
        conn.forget_session(sid)
        leave(session, conn, grace_secs=conn.detach_grace_secs)
        raise
    if conn.input_ended:  # the connection closed meanwhile: nobody to answer
        raise not_found(sid)
    adapter = session.adapter
    out: dict[str, Any] = {"sessionId": sid, "role": role, "historyPolicy": applied,
                           "connectedClients": connected_clients(session)}
    if adapter is not None:
        out.update(setup_result(adapter.setup_result, session.state.result_fields(),
                                builtin=adapter.builtin))
    return out


async def session_detach(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """Leave a session this connection is attached to, without ending it (module doc)."""
    sid = session_id(params)
    session = conn.sessions.get(sid) or conn.observing.get(sid)
    if session is None or session.released:
        conn.forget_session(sid)
        raise JsonRpcError(INVALID_PARAMS, MSG_NOT_ATTACHED.format(session_id=sid))
    conn.forget_session(sid)
    session.confirmed = True
    if not leave(session, conn, grace_secs=conn.detach_grace_secs):
        await conn.runtime.deactivate(session, "detach")  # no grace here: it ends
    return {"sessionId": sid, "status": "detached"}


def own_live_session(conn: DialectConnection, sid: str) -> EdgeSession | None:
    """The live session ``sid`` when it is the caller's own (exactly its principal) and a
    client may attach it; else None."""
    session = conn.runtime.registry.active.get(sid)
    if session is None or session.released or session.adapter is None \
            or session.taken_over or isinstance(session.port, HostedPort) \
            or session.principal != conn.caller.principal:
        return None
    return session


def connected_clients(session: EdgeSession) -> list[dict[str, Any]]:
    """The clients attached to ``session`` as the RFD lists them (name, version, role)."""
    ports: list[object] = [session.port, *session.clients.extra]
    out = []
    for port in ports:
        role = port.role if isinstance(port, Attachment) else ROLE_CONTROLLER
        if isinstance(port, Attachment) and port.closed:
            continue
        info = session.clients.info_of(conn_of(port))
        if info or hasattr(conn_of(port), "client_info"):
            out.append({**info, "role": role})
    return out
