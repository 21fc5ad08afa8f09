"""Which stored sessions a connection may see (SPEC §8 "visible to the caller", §14).

The local operator (principal ``""``: stdio, a gateway without auth) reads any
row; an authenticated gateway client (``client:<token id>``) only the sessions
it owns, and another client's session is reported exactly like one that does
not exist.
"""

from __future__ import annotations

import grpc

from acpgate.session.v1 import session_pb2
from services.edge.errors import grpc_error, not_found
from services.edge.runtime import EdgeRuntime

#: The visibility an authenticated gateway client gets: its own sessions only.
PRINCIPAL_VISIBILITY = "tree"


def list_visibility(principal: str) -> str:
    """The ``visibility`` of a ListSessions request on behalf of ``principal``."""
    return PRINCIPAL_VISIBILITY if principal else ""


async def visible_row(runtime: EdgeRuntime, principal: str, sid: str) -> session_pb2.SessionRow:
    """The stored row of ``sid`` if ``principal`` may see it, else -32000.

    The local operator reads any row; an authenticated gateway client only
    its own (§14 "tree" over the row's owner), and another client's session
    is reported exactly like one that does not exist.
    """
    stub = runtime.session_stub
    try:
        if not principal:
            return await stub.GetSession(session_pb2.GetSessionRequest(session_id=sid))
        status = await stub.SessionStatus(session_pb2.SessionStatusRequest(
            requester_session_key=principal, session_id=sid,
            visibility=PRINCIPAL_VISIBILITY))
        return status.session
    except grpc.aio.AioRpcError as exc:
        if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED):
            raise not_found(sid) from None
        raise grpc_error(exc, sid) from None
