"""Newline-delimited messages from a byte stream (SPEC §1: one message per line).

:func:`read_lines` splits a stream into lines without a per-line limit on the
stream itself: a line longer than ``max_line`` becomes one
:data:`~services.common.jsonrpc.wire.OVERSIZE_LINE` (answered as a parse
error, "line too long") instead of killing the reader, and reading goes on
with the next line. Used for stdin by ``acpgate acp`` and the built-in agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from services.common.jsonrpc.wire import OVERSIZE_LINE

#: A line longer than this (a 10 MiB blob is ~14 MiB of base64) is answered with a parse error.
MAX_LINE_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 16


async def read_lines(reader: asyncio.StreamReader,
                     max_line: int = MAX_LINE_BYTES) -> AsyncIterator[str]:
    """Split a byte stream into lines; an over-long line becomes one :data:`OVERSIZE_LINE`."""
    buf = bytearray()
    skipping = False
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            if buf and not skipping:
                yield buf.decode("utf-8", errors="surrogateescape")
            return
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not skipping:
                    buf += chunk[start:]
                    if len(buf) > max_line:
                        buf.clear()
                        skipping = True
                        yield OVERSIZE_LINE
                break
            if skipping:
                skipping = False
            else:
                buf += chunk[start:nl]
                line = buf.decode("utf-8", errors="surrogateescape")
                buf.clear()
                yield line
            start = nl + 1
