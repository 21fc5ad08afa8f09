"""Packing relayed events into the event log's chunks: one record per run, not per update.

A chunk (``session_pb2.EventChunk``, kept as :data:`Chunk` until it is sent) holds events of consecutive ids, of one turn, as
their lines joined by a newline — the relay's own strings, encoded once for the lot, no
message per update. What the lines share at their start (the ``session/update`` head up
to the event id: most of a text chunk's line) goes once, as the chunk's prefix, and each
line's rest in the payload: a third or less of the bytes to send and store, for a
slice per line. The relay numbers a burst's events one after the other, so what a
session relays in a commit window is a handful of chunks: a run goes on while the
next burst's first id follows the last one's and the turn is the same, and is cut near
:data:`CHUNK_CHARS` so that a reader of the log reads small rows. A line that holds a
raw newline (none that the relay makes does) goes as a chunk of its own, whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from services.edge.sessions.feed import Event

__all__ = ["CHUNK_CHARS", "Chunk", "pack_relayed"]

#: A packed chunk, the fields of ``session_pb2.EventChunk``: first and last event id, turn
#: id, kind, prefix, payload, when (ms). Plain values: a part sent again is written into
#: its new request as it is, its bytes copied once.
Chunk = tuple[int, int, int, str, bytes, bytes, int]

#: A chunk is cut once its lines reach this many characters (a single longer line is a
#: chunk of its own).
CHUNK_CHARS: Final = 64 * 1024
#: A shared start shorter than this is not worth a slice per line.
MIN_PREFIX: Final = 16
_KIND_UPDATE: Final = "update"
_SEPARATOR: Final = "\n"


class _Packer:
    """The chunks of one part's relayed runs, in order."""

    def __init__(self) -> None:
        self.out: list[Chunk] = []
        self._lines: list[str] = []
        self._first = self._next = self._turn = self._at = self._chars = 0

    def add(self, turn_id: int, at: int, lines: list[str], first: int, chars: int) -> None:
        """Lines of consecutive ids from ``first``, of turn ``turn_id``."""
        if self._lines and (turn_id != self._turn or first != self._next
                            or self._chars + chars > CHUNK_CHARS):
            self.close()
        if not self._lines:
            self._first, self._turn, self._at, self._chars = first, turn_id, at, 0
        self._lines.extend(lines)
        self._chars += chars
        self._next = first + len(lines)

    def close(self) -> None:
        """The chunk being built is done."""
        lines = self._lines
        if not lines:
            return
        self._lines = []
        prefix = ""
        if len(lines) > 1:  # the sorted first and last share what all of them share
            cut = _shared_start(min(lines), max(lines))
            if cut >= MIN_PREFIX:
                prefix = lines[0][:cut]
                lines = [line[cut:] for line in lines]
        text = _SEPARATOR.join(lines)
        if text.count(_SEPARATOR) == len(lines) - 1:
            self._chunk(self._first, self._first + len(lines) - 1, prefix, text)
        else:  # a line with a newline of its own: each line whole, on its own
            for offset, line in enumerate(lines):
                self._chunk(self._first + offset, self._first + offset, "", prefix + line)

    def _chunk(self, first: int, last: int, prefix: str, text: str) -> None:
        self.out.append((first, last, self._turn, _KIND_UPDATE, prefix.encode(), text.encode(),
                         self._at))


def _shared_start(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their start (slices compared whole)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def pack_relayed(runs: Iterable[tuple[int, int, Sequence[Event], int]]) -> list[Chunk]:
    """``runs`` (turn id, when, events, their characters; in the order relayed) as chunks."""
    packer = _Packer()
    for turn_id, at, events, chars in runs:
        count = len(events)
        if not count:
            continue
        first = events[0].event_id
        if events[-1].event_id - first != count - 1:  # not one after the other: one by one
            for event in events:
                packer.add(turn_id, at, [event.line], event.event_id, len(event.line))
            continue
        lines = [event.line for event in events]
        if chars <= CHUNK_CHARS:
            packer.add(turn_id, at, lines, first, chars)
            continue
        step = max(1, count * CHUNK_CHARS // chars)  # a long burst: cut on the average
        for start in range(0, count, step):
            part = lines[start:start + step]
            packer.add(turn_id, at, part, first + start, sum(map(len, part)))
    packer.close()
    return packer.out
