"""How the event log stores a chunk's events: the edge packs them, the session service reads.

A chunk holds events of consecutive ids (``services.session.store.event_log``). Its
``form`` says how each event's line is made from the chunk's ``prefix`` and the event's
part of the payload (the parts joined by a newline):

- :data:`FORM_LINES`: the line is ``prefix`` + the part (``prefix``: what the lines
  share at their start).
- :data:`FORM_TEXT_CHUNKS`: every event is an assistant text chunk as the edge numbers
  it (:func:`text_chunk_line`): ``prefix`` is the line's head up to the event id (the
  message's), the part is the chunk's text — the most common update stored as little
  more than its text, its line rebuilt byte for byte.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FORMS", "FORM_LINES", "FORM_TEXT_CHUNKS", "TEXT_CHUNK_MID", "TEXT_CHUNK_TAIL",
           "text_chunk_line", "text_chunk_lines"]

FORM_LINES: Final = 0
FORM_TEXT_CHUNKS: Final = 1
FORMS: Final = frozenset({FORM_LINES, FORM_TEXT_CHUNKS})
#: An assistant text chunk's line between its event id and its text, and after its text.
TEXT_CHUNK_MID: Final = '}},"content":{"type":"text","text":"'
TEXT_CHUNK_TAIL: Final = '"}}}}'
_MID_BYTES: Final = TEXT_CHUNK_MID.encode()
_TAIL_BYTES: Final = TEXT_CHUNK_TAIL.encode()


def text_chunk_line(head: str, event_id: int, text: str) -> str:
    """The ``session/update`` line of an assistant text chunk whose ``text`` needs no
    escaping: ``head`` (up to ``"eventId":``, the message's), the id, the text."""
    return f"{head}{event_id}{TEXT_CHUNK_MID}{text}{TEXT_CHUNK_TAIL}"


def text_chunk_lines(head: bytes, first: int, texts: list[bytes]) -> list[bytes]:
    """The lines of :data:`FORM_TEXT_CHUNKS` events from ``first`` on (bytes, as stored)."""
    return [b"%s%d%s%s%s" % (head, first + i, _MID_BYTES, text, _TAIL_BYTES)
            for i, text in enumerate(texts)]
