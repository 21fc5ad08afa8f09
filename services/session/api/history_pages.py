"""Cut history items into the ``HistoryPage`` messages of StreamHistory / GetHistory.

One gRPC message per item caps a stream at a few thousand items per second
(ARCHITECTURE.md, "gRPC streams must batch"), so the servicer sends pages. A page
is bounded by item count and by encoded size, and each store read is cut and sent
at once: nothing waits for more items to fill a page.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from acpgate_contracts.session.v1 import session_pb2 as pb

MAX_PAGE_ITEMS = 500
MAX_PAGE_BYTES = 1 << 20
# Per-item framing inside the repeated field: one tag byte plus a varint length.
_FIELD_OVERHEAD = 6


def cut_pages(
    items: Iterable[pb.HistoryItem],
    *,
    max_items: int = MAX_PAGE_ITEMS,
    max_bytes: int = MAX_PAGE_BYTES,
) -> Iterator[pb.HistoryPage]:
    """Consecutive non-empty pages of ``items`` in order, each of at most ``max_items``
    items and about ``max_bytes`` encoded bytes; an item larger than ``max_bytes``
    alone still makes a page (it is never dropped or split)."""
    page: list[pb.HistoryItem] = []
    size = 0
    for item in items:
        item_size = item.ByteSize() + _FIELD_OVERHEAD
        if page and (len(page) >= max_items or size + item_size > max_bytes):
            yield pb.HistoryPage(items=page)
            page, size = [], 0
        page.append(item)
        size += item_size
    if page:
        yield pb.HistoryPage(items=page)
