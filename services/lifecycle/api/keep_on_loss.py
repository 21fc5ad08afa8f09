"""Leases kept open for a new attacher after theirs was lost (``AttachOpen.keep_on_loss``).

A gateway edge worker that dies (``kill -9``, a crash) ends its ``Attach`` streams
without closing their leases. A stream opened with ``keep_on_loss`` then does not take
its lease with it: the adapter runs on, this service keeps its ends of the adapter's
pipes (so the adapter never sees EOF; what it writes waits in its stdout pipe, and it
blocks once the pipe is full), and the restarted worker attaches again on the lease
(``open{lease_id}``) — taking the pipes again over the fd socket. A lease nobody attaches
to within :data:`KEEP_SECS` is closed (reason ``"detached"``) exactly as without the flag;
one closed meanwhile (``CloseSession``) or whose adapter exited needs no waiting.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from services.common.logs import get_logger

if TYPE_CHECKING:
    from services.lifecycle.attach.channel import AdapterChannel
    from services.lifecycle.controller import LifecycleController

__all__ = ["KEEP_SECS", "keep_for_reattach", "keep_later"]

log = get_logger("lifecycle.kept")

#: How long a lease whose attacher was lost waits for a new one (a restarted edge worker
#: attaches within a few seconds of its start).
KEEP_SECS: Final = 30.0
#: How often the wait looks whether someone attached, or the lease ended.
_LOOK_SECS: Final = 0.1
#: A close that found the lease reattached.
REASON_DETACHED: Final = "detached"


def keep_later(controller: LifecycleController, channel: AdapterChannel,
               tasks: set[asyncio.Task[None]]) -> asyncio.Task[None]:
    """:func:`keep_for_reattach` in a task of its own, held in ``tasks`` until it ends."""
    task = asyncio.create_task(keep_for_reattach(controller, channel))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


async def keep_for_reattach(controller: LifecycleController, channel: AdapterChannel,
                            keep_secs: float = KEEP_SECS) -> None:
    """Keep ``channel``'s lease open until a new attacher comes, the lease ends, or
    ``keep_secs`` pass (then close it); the attacher that was lost held generation
    ``channel.generation``."""
    lease_id, lost = channel.lease_id, channel.generation
    if channel.attached:  # another attacher holds it (this one was refused as busy)
        return
    if not channel.running:  # its exit is known: nothing to keep
        await controller.close_later(lease_id, REASON_DETACHED)
        return
    log.info("attacher_lost_lease_kept", lease_id=lease_id, keep_secs=keep_secs)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + keep_secs
    while loop.time() < deadline:
        if controller.channel(lease_id) is not channel:
            return  # closed meanwhile
        if channel.generation != lost or channel.attached:
            log.info("kept_lease_reattached", lease_id=lease_id)
            return
        if channel.finished.is_set():
            break  # the adapter exited while nobody was attached
        await asyncio.sleep(_LOOK_SECS)
    else:
        log.warning("kept_lease_not_reattached", lease_id=lease_id, after_secs=keep_secs)
    if controller.channel(lease_id) is channel and channel.generation == lost \
            and not channel.attached:
        await controller.close_later(lease_id, REASON_DETACHED)
