"""A big history is read in byte-bounded pages, on every backend.

Pages are at most 500 items; for a session storing more than ``HISTORY_PAGE_BYTES``
they are also at most that many item bytes (a larger item alone), so the session
service never holds a history of big prompts many items at a time. Either way the
pages, concatenated, are the whole history in order, from any ``after_seq``.
"""

from __future__ import annotations

from services.session.store import HistoryEntry, NewSession, SessionStore
from services.session.store.interface import HISTORY_PAGE_BYTES
from services.session.store.records import item_bytes
from services.session.store.sql.history import page_end

MIB = 1024 * 1024


def test_page_end() -> None:
    assert page_end([(1, 10), (2, 10), (3, 10)], 25) == 2
    assert page_end([(1, 10), (2, 10), (3, 10)], 30) == 3
    assert page_end([(4, 100), (5, 1)], 10) == 4  # a larger first item alone


async def test_big_history_pages_are_byte_bounded(store: SessionStore) -> None:
    await store.create_session(NewSession("big", "a", "/w"))
    sizes = [3 * MIB, 10, 20, 2 * MIB, 5 * MIB, 30, 1 * MIB, 40]
    for n, size in enumerate(sizes):
        await store.append_turn("big", [HistoryEntry(role="user", text=chr(97 + n) * size)])
    assert (await store.get_session("big")).stored_bytes > HISTORY_PAGE_BYTES
    pages = [page async for page in store.iter_history_pages("big")]
    assert [len(e.text) for page in pages for e in page] == sizes
    for page in pages:
        assert len(page) == 1 or sum(map(item_bytes, page)) <= HISTORY_PAGE_BYTES
    assert len(pages) > 1
    tail = [e.seq async for page in store.iter_history_pages("big", after_seq=5) for e in page]
    assert tail == [6, 7, 8]


async def test_small_history_pages_by_count(store: SessionStore) -> None:
    await store.create_session(NewSession("small", "a", "/w"))
    for n in range(7):
        await store.append_turn("small", [HistoryEntry(role="user", text=f"t{n}")])
    pages = [page async for page in store.iter_history_pages("small", page=3)]
    assert [[e.text for e in page] for page in pages] == [
        ["t0", "t1", "t2"], ["t3", "t4", "t5"], ["t6"]]
