"""ACP ``session/delete``: a stored session and its history, gone in one transaction.

Visibility is checked first, as for ``session/load`` (another principal's
session is "not found", wherever it runs); a session being set up here (new or
restored) cannot be deleted meanwhile; one active here is closed first, as
``session/close`` would (its turn cancelled, its adapter released, its claim
dropped). A session another live host serves is refused with SPEC §8's
"Session already active", and nothing is removed: the session service deletes
only while no other host holds the row's claim.
"""

from __future__ import annotations

from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS, MSG_SESSION_BEING_SET_UP
from services.edge.backends.errors import ServiceError
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.visibility import visible_row
from services.edge.errors import not_found
from services.edge.params import session_id
from services.edge.sessions.claims import refusal


async def session_delete(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """Close the session if it is active here, then delete its row and history."""
    rt = conn.runtime
    sid = session_id(params)
    if not rt.persistent:
        raise not_found(sid)
    await visible_row(rt, conn.caller, sid)
    if sid in rt.registry.restoring or sid in rt.registry.creating:
        raise JsonRpcError(INVALID_PARAMS, MSG_SESSION_BEING_SET_UP.format(session_id=sid))
    session = rt.registry.active.get(sid)
    if session is not None:
        rt.remove(session)
        conn.forget_session(sid, session)  # another one as the release ends
        session.cancel(keep=False)  # deleted next: storing the turn is pointless
        await session.wait_turn()
        await rt.release(session, "delete")
    try:
        deleted = await rt.session_service.delete_session(sid, rt.claims.instance_id)
    except ServiceError as exc:
        raise refusal(exc, sid) from None
    if not deleted:
        raise not_found(sid)
    return {}
