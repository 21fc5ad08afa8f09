"""One SSE reader of a stream: events written as they come, keepalives while none do.

Every event carries its ``id`` (``Last-Event-ID`` resumes after it). A JSON-RPC
message is one ``data:`` line — JSON text has no raw line breaks inside strings,
and any between tokens become separate ``data:`` lines the reader joins again.
What is pending when the reader wakes goes out in one write (as the WebSocket
pump does, ``services.edge.transport.outqueue.WRITE_RUN_CHARS``); the write waits while the
client does not read, so a slow reader slows only its connection's sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Final

import orjson

from services.common.logs import get_logger
from services.common.remote_transport import M_REPLAY_GAP
from services.edge.transport.exchange import HttpResponse
from services.edge.transport.outqueue import WRITE_RUN_CHARS
from services.edge.transport.streamable.streams import Event, EventStream, Gap

__all__ = ["KEEPALIVE", "encode_data", "encode_event", "gap_event", "pump"]

log = get_logger("edge.http")

#: An SSE comment: keeps proxies and load balancers from timing out a quiet stream.
KEEPALIVE: Final = b": keepalive\n\n"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def encode_event(event: Event) -> bytes:
    """``id: <n>`` and the message as ``data:`` line(s)."""
    data = event.data
    if "\n" in data or "\r" in data:
        data = "\ndata: ".join(_LINE_BREAK.split(data))
    return f"id: {event.id}\ndata: {data}\n\n".encode()


def encode_data(data: str) -> bytes:
    """A message as an SSE event without an ``id`` (one a gap lost, from the session's log)."""
    if "\n" in data or "\r" in data:
        data = "\ndata: ".join(_LINE_BREAK.split(data))
    return f"data: {data}\n\n".encode()


def gap_event(gap: Gap) -> bytes:
    """An ``event: error`` whose data is an ACP extension notification naming what was lost
    (a client that does not read ``event:`` ignores an unknown ``_`` method)."""
    note = {"jsonrpc": "2.0", "method": M_REPLAY_GAP, "params": {
        "lastEventId": str(gap.last_event_id),
        "missedFrom": str(gap.missed_from), "missedTo": str(gap.missed_to),
        "message": (f"events {gap.missed_from}..{gap.missed_to} of this stream are no longer "
                    "held (the replay buffer keeps the newest ones only); what follows starts "
                    f"at {gap.missed_to + 1}. Reload the session (session/load) to catch up.")}}
    return b"event: error\ndata: " + orjson.dumps(note) + b"\n\n"


async def _write_fill(response: HttpResponse, fill: AsyncIterator[list[str]],
                      gap: bytes) -> None:
    """The events a gap lost, read from the session's log, as SSE events without an id (the
    client's ``Last-Event-ID`` stays where it was until the stream's own events follow); a log
    that cannot be read is told as the gap (``gap``)."""
    try:
        async for lines in fill:
            await response.write(b"".join(encode_data(line) for line in lines))
    except ConnectionError:
        raise
    except Exception as exc:  # the store unreachable, the session gone: say what was lost
        log.warning("sse_fill_failed", why=type(exc).__name__)
        await response.write(gap)


async def pump(stream: EventStream, token: object, response: HttpResponse, *,
               keepalive_secs: float, written: Callable[[int, int], None],
               first: bytes = b"", fill: AsyncIterator[list[str]] | None = None) -> None:
    """Write ``stream``'s events to ``response`` while ``token`` is its reader and the client
    reads; ``written(chars, count)`` returns what was sent for the first time to the budget.
    ``first``: a gap's note, sent first — unless ``fill`` gives the gap's events instead.
    Ends (without ending the response) when the stream closes, another reader takes it, or
    the client goes away (``ConnectionError`` is not raised)."""
    gone = asyncio.ensure_future(response.closed.wait())
    try:
        if fill is not None:
            await _write_fill(response, fill, first)
        elif first:
            await response.write(first)
        while stream.reader is token and not stream.closed:
            events, chars, count = stream.take(WRITE_RUN_CHARS)
            if events:
                written(chars, count)
                await response.write(b"".join(encode_event(e) for e in events))
                continue
            stream.wake.clear()
            if stream.pending or stream.reader is not token or stream.closed:
                continue
            woke = asyncio.ensure_future(stream.wake.wait())
            try:
                done, _ = await asyncio.wait({woke, gone}, timeout=keepalive_secs,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                woke.cancel()
            if gone in done:
                return
            if not done:
                await response.write(KEEPALIVE)
    except ConnectionError:
        return
    finally:
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        stream.detach(token)
