"""Newline-delimited messages from a byte stream (SPEC §1: one message per line).

:func:`read_lines` runs :class:`~services.common.line_split.LineSplitter`, one line at a
time, on an asyncio reader (stdin of ``acpgate acp`` and of the built-in agent;
``acpgate bridge`` runs the splitter on its stdin thread): a line longer than
``max_line`` bytes is skipped up to its newline — never buffered past the limit — and
stands as one :class:`~services.common.line_split.OversizeLine` carrying its length,
answered as a parse error ("line too long (<n> bytes, limit <m>)", id null) while
reading goes on with the next line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from services.common.line_split import LineSplitter

#: A line longer than this (a 10 MiB blob is ~14 MiB of base64) is answered with a parse error.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: One read of the stream.
READ_CHUNK_BYTES = 1 << 16


class ChunkReader(Protocol):
    """What :func:`read_lines` reads: ``await read(n)`` (b"" at the end), like a StreamReader."""

    async def read(self, n: int = -1, /) -> bytes:
        """At most ``n`` bytes, b"" at the end of the stream."""


async def read_lines(reader: ChunkReader, max_line: int = MAX_LINE_BYTES) -> AsyncIterator[str]:
    """Split a byte stream into lines; an over-long line becomes one :class:`OversizeLine`."""
    cutter = LineSplitter(max_line, blocks=False)
    while True:
        chunk = await reader.read(READ_CHUNK_BYTES)
        if not chunk:
            last = cutter.end()
            if last is not None:
                yield last
            return
        for line in cutter.feed(chunk):
            yield line
