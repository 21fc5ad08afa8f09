"""Newline-delimited messages from a byte stream (SPEC §1: one message per line).

:class:`LineCutter` cuts a stream's chunks into lines without a per-line limit on
the stream itself: a line longer than ``max_line`` bytes is skipped up to its
newline — never buffered past the limit, so a 100 MB line costs no more memory
than the limit — and stands as one :class:`~services.common.jsonrpc.wire.OversizeLine`
carrying its length, answered as a parse error ("line too long (<n> bytes,
limit <m>)", id null) while reading goes on with the next line. :func:`read_lines`
runs it on an asyncio reader: stdin of ``acpgate acp`` and of the built-in agent;
``acpgate bridge`` runs it on its stdin thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from services.common.jsonrpc.wire import OversizeLine

#: A line longer than this (a 10 MiB blob is ~14 MiB of base64) is answered with a parse error.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: One read of the stream.
READ_CHUNK_BYTES = 1 << 16


class ChunkReader(Protocol):
    """What :func:`read_lines` reads: ``await read(n)`` (b"" at the end), like a StreamReader."""

    async def read(self, n: int = -1, /) -> bytes:
        """At most ``n`` bytes, b"" at the end of the stream."""


def _text(data: bytes | bytearray) -> str:
    return data.decode("utf-8", errors="surrogateescape")


class LineCutter:
    """Cuts chunks of one byte stream into lines (text, undecodable bytes kept as surrogates);
    a line over ``max_line`` bytes becomes one :class:`OversizeLine`, its bytes dropped."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        #: The unterminated start of the next line (at most ``max_line`` bytes).
        self._buf = bytearray()
        #: Bytes of an over-long line skipped so far (-1: not skipping).
        self._skipped = -1

    def feed(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes, in order."""
        out: list[str] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._hold(chunk, start)
                return out
            if self._skipped >= 0:
                out.append(OversizeLine(self._skipped + nl - start, self._max))
                self._skipped = -1
            elif len(self._buf) + nl - start > self._max:
                out.append(OversizeLine(len(self._buf) + nl - start, self._max))
                self._buf.clear()
            elif self._buf:
                self._buf += chunk[start:nl]
                out.append(_text(self._buf))
                self._buf.clear()
            else:
                out.append(_text(chunk[start:nl]))
            start = nl + 1

    def _hold(self, chunk: bytes, start: int) -> None:
        """Keep the unterminated rest of ``chunk``, or count it when the line is over-long."""
        if self._skipped >= 0:
            self._skipped += len(chunk) - start
            return
        self._buf += chunk[start:]
        if len(self._buf) > self._max:
            self._skipped = len(self._buf)
            self._buf.clear()

    def end(self) -> str | None:
        """At the end of the stream: its last line, if it had no newline."""
        if self._skipped >= 0:
            skipped, self._skipped = self._skipped, -1
            return OversizeLine(skipped, self._max)
        if self._buf:
            line = _text(self._buf)
            self._buf.clear()
            return line
        return None


async def read_lines(reader: ChunkReader, max_line: int = MAX_LINE_BYTES) -> AsyncIterator[str]:
    """Split a byte stream into lines; an over-long line becomes one :class:`OversizeLine`."""
    cutter = LineCutter(max_line)
    while True:
        chunk = await reader.read(READ_CHUNK_BYTES)
        if not chunk:
            last = cutter.end()
            if last is not None:
                yield last
            return
        for line in cutter.feed(chunk):
            yield line
