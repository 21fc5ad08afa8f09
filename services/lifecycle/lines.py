"""Cutting a byte stream into line blocks, one pass per chunk (the adapter's stdout).

:class:`LineSplitter` takes the chunks of one stream as they are read and gives
back, per chunk, the text of every line completed in it: the line begun in
earlier chunks on its own, then all lines wholly inside the chunk as one
newline-separated block (one decode per chunk, not one per line; "replace"
decoding never swallows a newline, so that equals a decode per line). A line
longer than ``max_line`` bytes is dropped, up to its newline, without losing
its neighbours.
"""

from __future__ import annotations

import bisect
import collections
import itertools
from collections.abc import Callable

#: Lines read together and their total size in characters.
Block = tuple[list[str], int]


class LineSplitter:
    """Splits one stream's chunks into newline-terminated line blocks."""

    def __init__(self, max_line: int, on_too_long: Callable[[], None]) -> None:
        self._max_line = max_line
        self._too_long = on_too_long
        #: The unterminated start of the next line.
        self._partial = bytearray()
        #: Inside an over-long line: discard up to its newline.
        self._dropping = False

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


def take_batch(blocks: collections.deque[Block], max_size: int) -> Block:
    """Take the longest run of queued lines within ``max_size`` characters (at least one
    line), in order, off ``blocks``: the lines and their size.

    Whole blocks are taken at once; only the block at the bound is cut (bisect over its
    running sizes), so a batch costs no Python step per line.
    """
    batch: list[str] = []
    size = 0
    while blocks:
        lines, block_size = blocks[0]
        if size + block_size <= max_size:
            blocks.popleft()
            batch += lines
            size += block_size
            continue
        # The lines of this block that still fit (the first one of a batch always).
        sizes = list(itertools.accumulate(map(len, lines)))
        k = bisect.bisect_right(sizes, max_size - size)
        if not batch:
            k = max(k, 1)
        if k == len(lines):  # one line over the bound, alone
            blocks.popleft()
            batch += lines
            size += block_size
        elif k:
            blocks[0] = (lines[k:], block_size - sizes[k - 1])
            batch += lines[:k]
            size += sizes[k - 1]
        break
    return batch, size
