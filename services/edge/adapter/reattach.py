"""Re-attaching a link whose ``Attach`` stream broke because the lifecycle service died.

``acpgate serve`` restarts a lifecycle service that dies, and the restarted one re-adopts
the live wrappers of its slot (their adapters never stopped). A link whose stream ended
with UNAVAILABLE after it was attached opens the stream again on its lease, for up to
:data:`REATTACH_SECS`: where the edge holds the adapter's pipes it goes on reading and
writing them meanwhile and asks only for the exit (``resume_pipes``); over the stream, the
lines it writes meanwhile wait in its queue, and the adapter's wait in its stdout pipe.
A lease the new service does not serve (NOT_FOUND, FAILED_PRECONDITION) ends the link as
lost, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.common.logs import get_logger
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.lifecycle import Attached, AttachStream

__all__ = ["REATTACH_SECS", "reattach"]

log = get_logger("edge.adapter")

#: How long a broken stream is re-opened: a restart, and the wrappers' adoption window.
REATTACH_SECS = 20.0
#: Between two tries.
RETRY_SECS = 0.1
#: What a dead or restarting lifecycle service answers.
RETRIABLE = frozenset({Failure.UNAVAILABLE})


async def reattach(lease_id: str, exc: ServiceError,
                   reopen: Callable[[], AttachStream]) -> AttachStream | None:
    """A new ``Attach`` stream on ``lease_id`` whose first event (:class:`Attached`) came,
    made by ``reopen``; None when ``exc`` is not a service restart or the lease is not
    served."""
    if exc.kind not in RETRIABLE or not lease_id:
        return None
    log.warning("attach_stream_broken", lease_id=lease_id, code=exc.code)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REATTACH_SECS
    while loop.time() < deadline:
        await asyncio.sleep(RETRY_SECS)
        call = reopen()
        try:
            first = await call.read()
        except ServiceError as again:
            call.cancel()
            if again.kind in RETRIABLE:
                continue
            log.warning("reattach_refused", lease_id=lease_id, code=again.code,
                        why=again.detail)
            return None
        if not isinstance(first, Attached) or first.ensured is not None:
            call.cancel()
            return None
        log.info("attach_stream_resumed", lease_id=lease_id)
        return call
    log.warning("reattach_gave_up", lease_id=lease_id, after_secs=REATTACH_SECS)
    return None
