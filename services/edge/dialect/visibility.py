"""Who asks the session service about stored sessions for a connection (SPEC §8, §14).

The session service decides what a requester may see; this module only says
who asks, explicitly (an empty requester is never the operator):

- the operator (:data:`services.edge.caller.LOCAL_OPERATOR`: stdio, a gateway
  without auth) asks as ``operator`` and reads any row;
- any other caller asks as its principal (``client:<token id>``, or for a
  hosted session's stand-in the host's principal) and sees that principal's
  rows — plus, to *list* them, other principals' rows when its token holds the
  ``see-all`` grant. Loading, resuming, deleting or touching another
  principal's session is never allowed, grant or not: it is reported exactly
  like a session that does not exist.
"""

from __future__ import annotations

from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import Reader, SessionRow
from services.edge.caller import Caller
from services.edge.errors import not_found, service_error
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.session import EdgeSession

__all__ = ["reader_fields", "visible_row"]


async def reader_fields(runtime: EdgeHub[EdgeSession], caller: Caller) -> Reader:
    """Who ``caller`` reads as (ListSessions): the operator, or its principal with its
    ``see-all`` grant looked up now."""
    if caller.operator:
        return Reader(operator=True)
    return Reader(requester_session_key=caller.principal,
                  see_all_principals=await runtime.sees_all(caller.principal))


async def visible_row(runtime: EdgeHub[EdgeSession], caller: Caller, sid: str) -> SessionRow:
    """The stored row of ``sid`` if ``caller`` may act on it (load, resume, delete, touch),
    else -32000 exactly as for a session that does not exist. No grant applies: a grant
    reads, it never drives another principal's session."""
    who = Reader(operator=True) if caller.operator \
        else Reader(requester_session_key=caller.principal)
    try:
        status = await runtime.session_service.session_status(sid, who)
        return status.session
    except ServiceError as exc:
        if exc.kind is Failure.NOT_FOUND:
            raise not_found(sid) from None
        raise service_error(exc, sid) from None
