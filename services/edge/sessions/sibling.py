"""Which sibling edge worker serves a session this worker could not claim.

With ``[gateway] workers`` above one, a session is claimed by the worker serving
it (``<instance>/w<k>``). A WebSocket client reconnecting without the affinity
cookie may land on another worker; its ``session/load``/``resume`` there is refused
("Session already active"), and a WebSocket cannot be handed over mid-stream.
Rather than relay that connection's traffic through a second worker for its whole
life, the refusal names the worker and how to reach it (its cookie, or
``/acp?worker=<k>``, which the front door hands to that worker) in
``data.acpgate.liveAt`` — the shape a session live on another host is named in,
plus ``worker`` and ``query``: see docs/operating.md, "Edge workers".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import META_ACPGATE, META_LIVE_AT, MSG_SESSION_ON_SIBLING_WORKER
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import Claim
from services.edge.sessions.worker_link import split_worker_name

if TYPE_CHECKING:
    from services.edge.backends.session import SessionBackend

__all__ = ["on_sibling", "sibling_where"]

#: How long the look-up of the holder may take (the refusal goes out plain after it).
_LOOKUP_SECS: Final = 5.0


async def on_sibling(service: SessionBackend, instance_id: str, session_id: str,
                     error: JsonRpcError) -> JsonRpcError:
    """``error`` (a claim refused), naming the sibling worker of this host that holds the
    session when one does (``data.worker``); else ``error`` itself."""
    host, me = split_worker_name(instance_id)
    if not me:
        return error
    try:
        row = await service.get_session(session_id, deadline_secs=_LOOKUP_SECS)
    except ServiceError:
        return error
    holder_host, worker = split_worker_name(row.claim.instance_id)
    if holder_host != host or not worker or worker == me:
        return error
    return JsonRpcError(error.code, error.message + MSG_SESSION_ON_SIBLING_WORKER.format(
        worker=worker), {META_ACPGATE: {META_LIVE_AT: sibling_where(row.claim, worker)}})


def sibling_where(claim: Claim, worker: int) -> dict[str, object]:
    """``data.acpgate.liveAt`` of a session a sibling worker of this host serves: as for
    another host, plus the worker and the query that reaches it."""
    where: dict[str, object] = {"host": claim.host, "instanceId": claim.instance_id,
                                "worker": worker, "query": f"worker={worker}"}
    if claim.public_url:
        where["url"] = claim.public_url
    return where
