"""Packing relayed events into the event log's chunks: runs of consecutive ids become one
chunk, each event's line is its chunk's prefix followed by its part of the payload."""

from __future__ import annotations

from collections.abc import Sequence

from services.common.log_forms import FORM_LINES, FORM_TEXT_CHUNKS, text_chunk_lines
from services.edge.sessions.feed import Event, SessionFeed
from services.edge.sessions.log_chunks import CHUNK_CHARS, Chunk, pack_relayed

HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{'


def events(first: int, count: int, text: str = "hello") -> list[Event]:
    return [Event(first + i, f'{HEAD}"eventId":{first + i},"text":"{text} {i}"}}}}', "")
            for i in range(count)]


def run(turn: int, evs: Sequence[Event]) -> tuple[int, int, Sequence[Event], int]:
    return turn, 1, evs, sum(len(e.line) for e in evs)


def lines_of(chunk: Chunk) -> list[tuple[int, str]]:
    """The chunk's events as a reader gets them: (event id, line)."""
    first, last, _, _, prefix, payload, _, form = chunk
    parts = [payload] if first == last else payload.split(b"\n")
    assert len(parts) == last - first + 1
    if form == FORM_TEXT_CHUNKS:
        return [(first + i, line.decode())
                for i, line in enumerate(text_chunk_lines(prefix, first, parts))]
    assert form == FORM_LINES
    return [(first + i, (prefix + p).decode()) for i, p in enumerate(parts)]


def bounds(chunks: list[Chunk]) -> list[tuple[int, int, int]]:
    """(first, last, turn id) of each chunk."""
    return [(c[0], c[1], c[2]) for c in chunks]


def test_bursts_that_follow_each_other_are_one_chunk_with_their_shared_start_once() -> None:
    a, b = events(100, 3), events(103, 4, "héllo ✓")
    chunks = pack_relayed([run(7, a), run(7, b)])
    assert len(chunks) == 1
    chunk = chunks[0]
    assert chunk[:4] == (100, 106, 7, "update")
    assert chunk[4].startswith(HEAD.encode())
    assert lines_of(chunk) == [(e.event_id, e.line) for e in a + b]


def test_a_gap_in_the_ids_or_another_turn_starts_a_new_chunk() -> None:
    a, b, c = events(1, 2), events(4, 2), events(6, 2)
    chunks = pack_relayed([run(1, a), run(1, b), run(2, c)])
    assert bounds(chunks) == [(1, 2, 1), (4, 5, 1), (6, 7, 2)]
    assert [pair for ch in chunks for pair in lines_of(ch)] == \
        [(e.event_id, e.line) for e in a + b + c]


def test_ids_that_do_not_follow_each_other_within_a_burst_are_cut_there() -> None:
    evs = [*events(10, 2), *events(20, 2)]
    chunks = pack_relayed([run(0, evs)])
    assert bounds(chunks) == [(10, 11, 0), (20, 21, 0)]


def test_a_line_holding_a_newline_goes_whole_on_its_own() -> None:
    evs = events(1, 3)
    evs[1] = Event(2, evs[1].line.replace("hello", "two\nlines"), "")
    chunks = pack_relayed([run(0, evs)])
    assert [pair for ch in chunks for pair in lines_of(ch)] == [(e.event_id, e.line)
                                                                for e in evs]
    assert all(first == last for first, last, _ in bounds(chunks))


def test_a_long_burst_is_cut_near_the_chunk_size_and_keeps_every_line() -> None:
    evs = events(1, 2000, "x" * 200)
    chunks = pack_relayed([run(3, evs)])
    assert len(chunks) > 1
    assert all(len(ch[4]) + len(ch[5]) <= CHUNK_CHARS * 1.1 for ch in chunks)
    assert [pair for ch in chunks for pair in lines_of(ch)] == [(e.event_id, e.line)
                                                                for e in evs]


def test_lines_sharing_little_are_sent_without_a_prefix() -> None:
    evs = [Event(1, '{"a":1}', ""), Event(2, '{"b":2}', "")]
    (chunk,) = pack_relayed([run(0, evs)])
    assert chunk[4:6] == (b"", b'{"a":1}\n{"b":2}')


def test_text_chunks_of_one_message_are_stored_as_their_texts() -> None:
    feed = SessionFeed("s", max_chars=1 << 20, start_id=500)
    a = feed.stamp(["one", "two ✓"], None)
    b = feed.stamp(["three"], None)
    tool = feed.stamp([{"sessionUpdate": "tool_call", "toolCallId": "t"}], None)
    c = feed.stamp(["four"], None)  # a new message after the tool call
    chunks = pack_relayed([run(1, a), run(1, b), run(1, tool), run(1, c)])
    assert [(ch[0], ch[1], ch[7]) for ch in chunks] == [
        (500, 502, FORM_TEXT_CHUNKS), (503, 503, FORM_LINES), (504, 504, FORM_TEXT_CHUNKS)]
    assert chunks[0][5] == "one\ntwo ✓\nthree".encode()
    assert [pair for ch in chunks for pair in lines_of(ch)] == \
        [(e.event_id, e.line) for e in a + b + tool + c]


def test_a_burst_of_text_chunks_and_other_updates_is_stored_as_lines() -> None:
    feed = SessionFeed("s", max_chars=1 << 20, start_id=1)
    mixed = feed.stamp(["a", {"sessionUpdate": "plan", "entries": []}, "b"], None)
    (chunk,) = pack_relayed([run(0, mixed)])
    assert chunk[7] == FORM_LINES
    assert lines_of(chunk) == [(e.event_id, e.line) for e in mixed]
