"""cut_pages: the count and byte bounds of a HistoryPage, order kept, nothing dropped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.session.api.history_pages import cut_pages


def _item(seq: int, size: int) -> pb.HistoryItem:
    return pb.HistoryItem(seq=seq, role=pb.HistoryItem.ROLE_USER, text="y" * size)


def test_oversized_item_travels_alone() -> None:
    """An item above the byte bound is neither dropped nor split: it makes its own page."""
    items = [_item(1, 10), _item(2, 5000), _item(3, 10)]
    pages = list(cut_pages(items, max_items=10, max_bytes=1000))
    assert [[i.seq for i in p.items] for p in pages] == [[1], [2], [3]]


def test_empty_input_gives_no_page() -> None:
    """No items, no (empty) page."""
    assert list(cut_pages([])) == []


@given(st.lists(st.integers(min_value=0, max_value=400), max_size=60),
       st.integers(min_value=1, max_value=7), st.integers(min_value=50, max_value=2000))
def test_pages_keep_order_and_bounds(sizes: list[int], max_items: int, max_bytes: int) -> None:
    """Concatenated pages equal the input; each page respects both bounds unless it is a
    single oversized item; no page is empty."""
    items = [_item(n + 1, size) for n, size in enumerate(sizes)]
    pages = list(cut_pages(items, max_items=max_items, max_bytes=max_bytes))
    assert [i.seq for p in pages for i in p.items] == [i.seq for i in items]
    for p in pages:
        assert 1 <= len(p.items) <= max_items
        assert len(p.items) == 1 or p.ByteSize() <= max_bytes
