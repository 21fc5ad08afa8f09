"""Packing relayed events into the event log's chunks: one record per run, not per update.

A chunk (the contract's ``EventChunk``, kept as :data:`Chunk` until it is sent) holds
events of consecutive ids, of one turn, their parts joined by a newline and encoded once
for the lot — no message per update. How a part makes a line is the chunk's form
(:mod:`services.common.log_forms`):

- a run of assistant text chunks the relay read without parsing (``Event.text``), all of
  one message: their texts, the message's line head once as the prefix — the line is
  rebuilt from them byte for byte (``FORM_TEXT_CHUNKS``);
- any other run: the lines as relayed, what they share at their start (the
  ``session/update`` head) once as the prefix, each line's rest in the payload
  (``FORM_LINES``).

The relay numbers a burst's events one after the other, so what a session relays in a
commit window is a handful of chunks: a run goes on while the next burst's first id
follows the last one's and turn, form and head are the same, and is cut near
:data:`CHUNK_CHARS` of lines so that a reader of the log reads small rows. A part that
holds a raw newline (none that the relay makes does) goes as a chunk of its own, whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, cast

from services.common.log_forms import FORM_LINES, FORM_TEXT_CHUNKS, text_chunk_line

if TYPE_CHECKING:
    from services.edge.sessions.feed import Event

__all__ = ["CHUNK_CHARS", "Chunk", "pack_relayed"]

#: A packed chunk, the fields of the contract's ``EventChunk``: first and last event id, turn
#: id, kind, prefix, payload, when (ms), form. Plain values: a part sent again is written
#: into its new request as it is, its bytes copied once.
Chunk = tuple[int, int, int, str, bytes, bytes, int, int]

#: A chunk is cut once its lines reach this many characters (a single longer line is a
#: chunk of its own).
CHUNK_CHARS: Final = 256 * 1024
#: A shared start shorter than this is not worth a slice per line.
MIN_PREFIX: Final = 16
_KIND_UPDATE: Final = "update"
_SEPARATOR: Final = "\n"


class _Packer:
    """The chunks of one part's relayed runs, in order."""

    def __init__(self) -> None:
        self.out: list[Chunk] = []
        self._parts: list[str] = []
        self._first = self._next = self._turn = self._at = self._chars = 0
        self._form = FORM_LINES
        self._head = ""

    def add(self, turn_id: int, at: int, parts: list[str], first: int, chars: int,
            form: int = FORM_LINES, head: str = "") -> None:
        """Parts of consecutive ids from ``first``, of turn ``turn_id``, in ``form``
        (``head``: the text chunks' line head)."""
        if self._parts and (turn_id != self._turn or first != self._next or form != self._form
                            or head != self._head or self._chars + chars > CHUNK_CHARS):
            self.close()
        if not self._parts:
            self._first, self._turn, self._at, self._chars = first, turn_id, at, 0
            self._form, self._head = form, head
        self._parts.extend(parts)
        self._chars += chars
        self._next = first + len(parts)

    def close(self) -> None:
        """The chunk being built is done."""
        parts = self._parts
        if not parts:
            return
        self._parts = []
        first, last = self._first, self._first + len(parts) - 1
        if self._form == FORM_TEXT_CHUNKS:
            text = _SEPARATOR.join(parts)
            if text.count(_SEPARATOR) == len(parts) - 1:
                self._chunk(first, last, self._head, text, FORM_TEXT_CHUNKS)
                return
            parts = [text_chunk_line(self._head, first + i, t) for i, t in enumerate(parts)]
        prefix = ""
        if len(parts) > 1:  # the sorted first and last share what all of them share
            cut = _shared_start(min(parts), max(parts))
            if cut >= MIN_PREFIX:
                prefix = parts[0][:cut]
                parts = [line[cut:] for line in parts]
        text = _SEPARATOR.join(parts)
        if text.count(_SEPARATOR) == len(parts) - 1:
            self._chunk(first, last, prefix, text, FORM_LINES)
        else:  # a line with a newline of its own: each line whole, on its own
            for offset, line in enumerate(parts):
                self._chunk(first + offset, first + offset, "", prefix + line, FORM_LINES)

    def _chunk(self, first: int, last: int, prefix: str, text: str, form: int) -> None:
        self.out.append((first, last, self._turn, _KIND_UPDATE, prefix.encode(), text.encode(),
                         self._at, form))


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


def _add_run(packer: _Packer, turn_id: int, at: int, events: Sequence[Event], chars: int
             ) -> None:
    """One burst of consecutive ids."""
    count = len(events)
    first = events[0].event_id
    texts = [event.text for event in events]
    head = events[0].head
    if None in texts or events[-1].head != head:  # not all text chunks of one message
        form, parts, head = FORM_LINES, [event.line for event in events], ""
    else:
        form, parts = FORM_TEXT_CHUNKS, cast(list[str], texts)  # no None in it
    if chars <= CHUNK_CHARS:
        packer.add(turn_id, at, parts, first, chars, form, head)
        return
    step = max(1, count * CHUNK_CHARS // chars)  # a long burst: cut on the average
    for start in range(0, count, step):
        piece = parts[start:start + step]
        packer.add(turn_id, at, piece, first + start, chars * len(piece) // count, form, head)


def pack_relayed(runs: Iterable[tuple[int, int, Sequence[Event], int]]) -> list[Chunk]:
    """``runs`` (turn id, when, events, their lines' characters; in the order relayed) as
    chunks."""
    packer = _Packer()
    for turn_id, at, events, chars in runs:
        count = len(events)
        if not count:
            continue
        if events[-1].event_id - events[0].event_id == count - 1:
            _add_run(packer, turn_id, at, events, chars)
            continue
        for event in events:  # not one after the other: one by one
            _add_run(packer, turn_id, at, [event], len(event.line))
    packer.close()
    return packer.out
