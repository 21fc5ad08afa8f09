"""Cutting a byte stream into line blocks, one pass per chunk (an adapter's stdout).

:class:`LineSplitter` takes the chunks of one stream as they are read and gives
back, per chunk, the text of every line completed in it: the line begun in
earlier chunks on its own, then all lines wholly inside the chunk as one
newline-separated block (one decode per chunk, not one per line; "replace"
decoding never swallows a newline, so that equals a decode per line). A line
longer than ``max_line`` bytes is dropped, up to its newline, without losing
its neighbours.

The lifecycle service splits an adapter's stdout with it while it reads the pipe itself,
and the edge once the pipe was handed to it: :meth:`LineSplitter.state` is
where the one left off, which the other goes on from.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["LineSplitter", "lines_of"]


class LineSplitter:
    """Splits one stream's chunks into newline-terminated line blocks."""

    def __init__(self, max_line: int, on_too_long: Callable[[], None], *,
                 partial: bytes = b"", dropping: bool = False) -> None:
        """``partial`` and ``dropping``: the state another splitter of the same stream left
        (:meth:`state`)."""
        self._max_line = max_line
        self._too_long = on_too_long
        #: The unterminated start of the next line.
        self._partial = bytearray(partial)
        #: Inside an over-long line: discard up to its newline.
        self._dropping = dropping

    def state(self) -> tuple[bytes, bool]:
        """``(partial, dropping)``: the unterminated start of the next line, and whether it
        is the rest of an over-long line being dropped — for a splitter that goes on
        reading the same stream elsewhere."""
        return bytes(self._partial), self._dropping

    def feed(self, chunk: bytes) -> list[str]:
        """The texts completed by ``chunk``, in order (each one or more lines)."""
        last = chunk.rfind(b"\n")
        if last < 0:
            self._hold(chunk)
            return []
        out: list[str] = []
        begin = 0
        if self._dropping:
            begin = chunk.find(b"\n") + 1  # the rest of the dropped line
            self._dropping = False
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
        """At end of stream: the last line if it had no newline (and was not dropped)."""
        if self._partial and not self._dropping:
            return self._partial.decode("utf-8", "replace")
        return None

    def _hold(self, chunk: bytes) -> None:
        """Keep a chunk without a newline as the start of the next line, within the bound."""
        if self._dropping:
            return
        self._partial += chunk
        if len(self._partial) > self._max_line:
            self._too_long()
            self._partial.clear()
            self._dropping = True

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
