"""A session live on another host or edge worker: where to attach it (issue 27, across hosts).

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
Anyone else's session, or one nobody serves, answers as before.
"""

from __future__ import annotations

import time

from services.common.attach_protocol import (
    MSG_LIVE_ELSEWHERE_NO_URL,
    MSG_LIVE_ELSEWHERE_RECONNECT,
    MSG_SESSION_LIVE_ELSEWHERE,
    SESSION_LIVE_ELSEWHERE,
)
from services.common.jsonrpc import JsonRpcError
from services.common.principals import principal_of_owner
from services.common.protocol import (
    META_ACPGATE,
)
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.visibility import visible_row

__all__ = ["live_elsewhere"]


async def live_elsewhere(conn: DialectConnection, sid: str) -> None:
    """Raise -32007 naming where ``sid`` is live when another host serves it for the
    caller's own principal; return otherwise (module doc)."""
    rt = conn.runtime
    if not rt.persistent:
        return
    try:
        row = await visible_row(rt, conn.caller, sid)
    except JsonRpcError:
        return
    claim = row.claim
    if not claim.instance_id or claim.instance_id == rt.claims.instance_id \
            or claim.until < int(time.time() * 1000) \
            or principal_of_owner(row.ownership.owner_session_key) != conn.caller.principal:
        return
    where = {"host": claim.host, "instanceId": claim.instance_id}
    if claim.public_url:
        where["url"] = claim.public_url
        then = MSG_LIVE_ELSEWHERE_RECONNECT.format(url=claim.public_url)
    else:
        then = MSG_LIVE_ELSEWHERE_NO_URL
    raise JsonRpcError(SESSION_LIVE_ELSEWHERE, MSG_SESSION_LIVE_ELSEWHERE.format(
        session_id=sid, host=claim.host, then=then), {META_ACPGATE: {"liveAt": where}})
