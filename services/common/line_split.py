"""Cutting a byte stream into lines, one pass per chunk: the one line splitter of acpgate.

:class:`LineSplitter` takes the chunks of one stream as they are read and gives back, per
chunk, the lines completed in it, in one of two ways chosen when it is made:

- **blocks** (an adapter's stdout, relayed in bulk): the line begun in earlier chunks on
  its own, then all lines wholly inside the chunk as one newline-separated block (one
  decode per chunk, not one per line; "replace" decoding never swallows a newline, so
  that equals a decode per line). A line longer than ``max_line`` bytes is dropped, up
  to its newline, and reported to ``on_too_long``, without losing its neighbours.
- **one by one** (a JSON-RPC reader: stdin of ``acpgate acp``, of ``acpgate bridge`` and
  of the built-in agent): each line on its own, undecodable bytes kept as surrogates; a
  line longer than ``max_line`` bytes stands as one :class:`OversizeLine` carrying its
  length, in its place, for the reader to answer with a parse error.

Either way an over-long line is skipped as it streams, never buffered past the limit, so
a 100 MB line costs no more memory than the limit. The lifecycle service splits an
adapter's stdout while it reads the pipe itself, and the edge once the pipe was handed to
it: :meth:`LineSplitter.state` is where the one left off, which the other goes on from.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["OVERSIZE_LINE", "LineSplitter", "OversizeLine", "lines_of"]

#: What a line reader yields in place of a line longer than its limit (not JSON).
OVERSIZE_LINE = "\x00line too long"


class OversizeLine(str):
    """:data:`OVERSIZE_LINE` standing for one skipped line: its length and the reader's limit
    (bytes), for the parse error that answers it."""

    size: int
    limit: int

    def __new__(cls, size: int, limit: int) -> OversizeLine:
        line = super().__new__(cls, OVERSIZE_LINE)
        line.size = size
        line.limit = limit
        return line


def _no_report() -> None:
    """The default ``on_too_long``: an over-long line is only skipped."""


class LineSplitter:
    """Splits one stream's chunks into lines: newline-separated blocks, or one by one."""

    def __init__(self, max_line: int, on_too_long: Callable[[], None] = _no_report, *,
                 partial: bytes = b"", dropping: bool = False, blocks: bool = True) -> None:
        """``blocks``: cut into blocks (else one line at a time, module doc). ``partial`` and
        ``dropping``: the state another splitter of the same stream left (:meth:`state`)."""
        self._max_line = max_line
        self._too_long = on_too_long
        self._blocks = blocks
        #: The unterminated start of the next line (at most ``max_line`` bytes).
        self._partial = bytearray(partial)
        #: Bytes of an over-long line skipped so far, up to its newline (-1: not skipping).
        self._skipped = 0 if dropping else -1

    def state(self) -> tuple[bytes, bool]:
        """``(partial, dropping)``: the unterminated start of the next line, and whether it
        is the rest of an over-long line being dropped — for a splitter that goes on
        reading the same stream elsewhere."""
        return bytes(self._partial), self._skipped >= 0

    def feed(self, chunk: bytes) -> list[str]:
        """The texts completed by ``chunk``, in order: blocks of one or more lines, or single
        lines (module doc)."""
        if not self._blocks:
            return self._lines(chunk)
        last = chunk.rfind(b"\n")
        if last < 0:
            self._hold(chunk, 0)
            return []
        out: list[str] = []
        begin = 0
        if self._skipped >= 0:
            begin = chunk.find(b"\n") + 1  # the rest of the dropped line
            self._skipped = -1
        elif self._partial:
            first = chunk.find(b"\n")
            begin = first + 1
            head = self._finish_partial(chunk[:first])
            if head is not None:
                out.append(head)
        if begin <= last:
            out.append(chunk[begin:last].decode("utf-8", "replace"))
        self._partial += chunk[last + 1:]
        return out

    def end(self) -> str | None:
        """At the end of the stream: its last line if it had no newline — in blocks, unless
        it was dropped; one by one, an over-long one as its :class:`OversizeLine`."""
        if self._blocks:
            if self._partial and self._skipped < 0:
                return self._partial.decode("utf-8", "replace")
            return None
        if self._skipped >= 0:
            skipped, self._skipped = self._skipped, -1
            return OversizeLine(skipped, self._max_line)
        if self._partial:
            line = self._partial.decode("utf-8", "surrogateescape")
            self._partial.clear()
            return line
        return None

    def _lines(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes, one by one."""
        out: list[str] = []
        start = 0
        limit = self._max_line
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._hold(chunk, start)
                return out
            if self._skipped >= 0:
                out.append(OversizeLine(self._skipped + nl - start, limit))
                self._skipped = -1
            elif len(self._partial) + nl - start > limit:
                out.append(OversizeLine(len(self._partial) + nl - start, limit))
                self._partial.clear()
            elif self._partial:
                self._partial += chunk[start:nl]
                out.append(self._partial.decode("utf-8", "surrogateescape"))
                self._partial.clear()
            else:
                out.append(chunk[start:nl].decode("utf-8", "surrogateescape"))
            start = nl + 1

    def _hold(self, chunk: bytes, start: int) -> None:
        """Keep the unterminated rest of ``chunk`` (from ``start``) as the start of the next
        line, within the bound; past it, count the line's bytes as skipped."""
        if self._skipped >= 0:
            self._skipped += len(chunk) - start
            return
        self._partial += chunk[start:] if start else chunk
        if len(self._partial) > self._max_line:
            self._too_long()
            self._skipped = len(self._partial)
            self._partial.clear()

    def _finish_partial(self, rest: bytes) -> str | None:
        """The held line completed by ``rest``; None (and reported) when it is too long."""
        if len(self._partial) + len(rest) > self._max_line:
            self._too_long()
            self._partial.clear()
            return None
        # Decode the joined line on its own: the held part may be megabytes.
        self._partial += rest
        head = self._partial.decode("utf-8", "replace")
        self._partial.clear()
        return head


def lines_of(text: str) -> list[str]:
    """The lines of a newline-separated block (:meth:`LineSplitter.feed`'s), each without
    its trailing CRs; blank lines are skipped."""
    lines = text.split("\n")
    if "\r" in text:
        lines = [line.rstrip("\r") if line.endswith("\r") else line for line in lines]
    if "" in lines:
        lines = [line for line in lines if line]
    return lines
