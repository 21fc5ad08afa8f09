"""An ``Attach`` stream whose caller may take the adapter's pipes (``AttachOpen.fd_pass``).

After the first response (with its ``fd_grant``) the stream relays nothing until the
caller chose: it redeems the grant on the fd socket (:mod:`services.lifecycle.attach.fd_server`)
and reads and writes the pipes itself — the stream then only carries the adapter's
exit (:func:`relay_exit`) and ``close_stdin`` — or it sends a request (``use_stream``,
or any other) and the stream relays as usual (:func:`settle`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from services.lifecycle.api.convert import exit_to_pb
from services.lifecycle.attach.channel import AdapterChannel
from services.lifecycle.attach.fd_grants import FdGrant
from services.lifecycle.controller import Ensured
from services.lifecycle.leases.store import LeaseRecord

__all__ = ["Opened", "prepend", "relay_exit", "resume", "settle"]

@dataclass
class Opened:
    """One Attach stream: its first response, its lease and channel, what its ensure did
    (None: opened on a lease id) and from which pool, whether a line went either way (or
    the pipes went to the caller), and whether the caller can take the pipes."""

    first: pb.AttachResponse
    lease: LeaseRecord
    channel: AdapterChannel
    ensured: Ensured | None
    pool: str
    touched: bool = False
    fd_pass: bool = False
    #: The caller holds the pipes already (``AttachOpen.resume_pipes``).
    resume_pipes: bool = False
    #: Its lease outlives a lost caller for a while (services.lifecycle.api.keep_on_loss).
    keep_on_loss: bool = False


#: A request to come from the caller (a pending read of its request stream).
Pending = asyncio.Future[pb.AttachRequest]


async def settle(grant: FdGrant, iterator: AsyncIterator[pb.AttachRequest],
                 ) -> tuple[bool, Pending | pb.AttachRequest | None]:
    """Wait for the caller's choice: ``(True, the pending read of its next request)`` once
    it took the pipes; ``(False, its first request)`` when it sent one instead (the
    stream relays); ``(False, None)`` when its requests ended first."""
    pending: Pending = asyncio.ensure_future(iterator.__anext__())
    either: list[asyncio.Future[Any]] = [grant.redeemed, pending]
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        pending.cancel()
        raise
    if grant.redeemed.done():
        return True, pending
    try:
        return False, pending.result()
    except StopAsyncIteration:
        return False, None


async def relay_exit(channel: AdapterChannel, iterator: AsyncIterator[pb.AttachRequest],
                     pending: Pending) -> AsyncIterator[pb.AttachResponse]:
    """The rest of a stream whose caller holds the pipes: the adapter's exit (with its
    stderr tail) once known; meanwhile its requests are served (``close_stdin`` closes
    this service's copy of stdin)."""
    pump = asyncio.create_task(_serve_requests(channel, iterator, pending))
    try:
        await channel.finished.wait()
        assert channel.exit_info is not None
        yield pb.AttachResponse(exit=exit_to_pb(channel.exit_info))
    finally:
        pump.cancel()
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump


async def resume(channel: AdapterChannel, iterator: AsyncIterator[pb.AttachRequest],
                 ) -> AsyncIterator[pb.AttachResponse]:
    """The rest of a stream whose caller holds the pipes from an earlier stream
    (``AttachOpen.resume_pipes``): stdout is not read here, only the exit goes out."""
    channel.stdout.keep_off()
    pending: Pending = asyncio.ensure_future(iterator.__anext__())
    async for response in relay_exit(channel, iterator, pending):
        yield response


async def _serve_requests(channel: AdapterChannel, iterator: AsyncIterator[pb.AttachRequest],
                          pending: Pending) -> None:
    read: Any = pending
    while True:
        try:
            request = await read
        except StopAsyncIteration:
            return
        kind = request.WhichOneof("msg")
        if kind == "stdin":  # the caller writes the pipe itself; a line sent here still goes
            await channel.write_lines(list(request.stdin.lines))
        elif kind == "close_stdin" and request.close_stdin:
            await channel.close_stdin()
        read = iterator.__anext__()


async def prepend(first: pb.AttachRequest | None,
                  iterator: AsyncIterator[pb.AttachRequest]) -> AsyncIterator[pb.AttachRequest]:
    """``first`` (when there is one), then ``iterator``'s requests."""
    if first is not None:
        yield first
    async for request in iterator:
        yield request
