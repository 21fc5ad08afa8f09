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
from typing import Any

import grpc

from services.common.logs import get_logger

__all__ = ["REATTACH_SECS", "STREAM_EOF", "reattach"]

log = get_logger("edge.adapter")

#: What ``read()`` of a stream call gives at its end.
STREAM_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
#: How long a broken stream is re-opened: a restart, and the wrappers' adoption window.
REATTACH_SECS = 20.0
#: Between two tries.
RETRY_SECS = 0.1
#: What a dead or restarting lifecycle service answers.
RETRIABLE = frozenset({grpc.StatusCode.UNAVAILABLE})


async def reattach(lease_id: str, exc: grpc.aio.AioRpcError, reopen: Callable[[], Any]) -> Any:
    """A new ``Attach`` call on ``lease_id`` whose first response (``attached``) came, made
    by ``reopen``; None when ``exc`` is not a service restart or the lease is not served."""
    if exc.code() not in RETRIABLE or not lease_id:
        return None
    log.warning("attach_stream_broken", lease_id=lease_id, code=exc.code().name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REATTACH_SECS
    while loop.time() < deadline:
        await asyncio.sleep(RETRY_SECS)
        call = reopen()
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as again:
            call.cancel()
            if again.code() in RETRIABLE:
                continue
            log.warning("reattach_refused", lease_id=lease_id, code=again.code().name,
                        why=again.details())
            return None
        if first is STREAM_EOF or first.WhichOneof("msg") != "attached":
            call.cancel()
            return None
        log.info("attach_stream_resumed", lease_id=lease_id)
        return call
    log.warning("reattach_gave_up", lease_id=lease_id, after_secs=REATTACH_SECS)
    return None
