"""Reading a session's history in pages both SQL backends share, bounded by count and by bytes.

A page is at most ``page`` items (500). For a session whose history is small, that
is all: one query per page. For a big one (its ``stored_bytes`` over the byte
bound) a page is also at most ``max_bytes`` of item bytes (a larger item alone):
the first query reads only the sizes of the next items (:data:`SELECT_HISTORY_SIZES`,
a few numbers), the second the rows that fit (:data:`SELECT_HISTORY_RANGE`), so a
history of fifteen-megabyte prompts never sits in the session service five
hundred items at a time. ``?`` placeholders, numbered for PostgreSQL
with :func:`~.sql.rows.numbered`; ``{size}`` is the backend's :func:`item_bytes_sql`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final

from services.session.store.records import ITEM_FIELDS, HistoryEntry
from services.session.store.sql.rows import HISTORY_COLUMNS

__all__ = [
    "SELECT_HISTORY_PAGE",
    "SELECT_HISTORY_RANGE",
    "SELECT_HISTORY_SIZES",
    "history_pages",
    "item_bytes_sql",
    "page_end",
]

#: History rows of session ``?`` after seq ``?``, oldest first, at most ``?`` (the page).
SELECT_HISTORY_PAGE: Final = (
    f"SELECT {HISTORY_COLUMNS} FROM history WHERE session_id = ? AND seq > ?"
    " ORDER BY seq LIMIT ?"
)
#: The seq and item bytes of at most ``?`` rows of session ``?`` after seq ``?``.
SELECT_HISTORY_SIZES: Final = (
    "SELECT seq, {size} FROM history WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)
#: History rows of session ``?`` with ``?`` < seq <= ``?``, oldest first.
SELECT_HISTORY_RANGE: Final = (
    f"SELECT {HISTORY_COLUMNS} FROM history WHERE session_id = ? AND seq > ? AND seq <= ?"
    " ORDER BY seq"
)


def item_bytes_sql(octets: Callable[[str], str]) -> str:
    """The SQL of a history row's item bytes (``records.item_bytes``), given the backend's
    UTF-8 byte length of a column."""
    return " + ".join(octets(column) for column in ("role", *ITEM_FIELDS))


def page_end(sizes: Sequence[tuple[int, int]], max_bytes: int) -> int:
    """The last seq of ``(seq, bytes)`` rows (in seq order) that fit ``max_bytes`` together;
    the first row's even when it alone is larger."""
    total = 0
    end = sizes[0][0]
    for seq, size in sizes:
        total += size
        if total > max_bytes and seq != sizes[0][0]:
            break
        end = seq
    return end


#: (after seq, limit) → rows; (after seq, limit) → (seq, bytes); (after seq, last seq) → rows.
ReadPage = Callable[[int, int], Awaitable[list[HistoryEntry]]]
ReadSizes = Callable[[int, int], Awaitable[list[tuple[int, int]]]]
ReadRange = Callable[[int, int], Awaitable[list[HistoryEntry]]]


async def history_pages(read_page: ReadPage, read_sizes: ReadSizes, read_range: ReadRange, *,
                        after_seq: int, page: int, max_bytes: int | None
                        ) -> AsyncIterator[list[HistoryEntry]]:
    """Non-empty pages of the items after ``after_seq``, oldest first: at most ``page``
    items each, and with ``max_bytes`` at most that many item bytes (a larger item alone)."""
    last = after_seq
    while True:
        if max_bytes is None:
            rows = await read_page(last, page)
            if rows:
                yield rows
            if len(rows) < page:
                return
            last = rows[-1].seq
            continue
        sizes = await read_sizes(last, page)
        if not sizes:
            return
        end = page_end(sizes, max_bytes)
        rows = await read_range(last, end)
        if rows:
            yield rows
        if len(sizes) < page and end == sizes[-1][0]:
            return
        last = end
