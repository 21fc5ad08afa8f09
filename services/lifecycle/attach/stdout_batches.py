"""Line blocks of the adapter's stdout, and the batches an attacher takes of them.

:class:`LineSplitter` (:mod:`services.common.line_split`, shared with the edge) cuts
the stdout chunks into line blocks; :func:`take_batch` takes the longest run of them
within a batch bound.
"""

from __future__ import annotations

import bisect
import collections
import itertools

from services.common.line_split import LineSplitter

__all__ = ["Block", "LineSplitter", "take_batch"]

#: Lines read together and their total size in characters.
Block = tuple[list[str], int]


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
