"""Packing relayed events into the event log's chunks: runs of consecutive ids become one
chunk, each event's line is its chunk's prefix followed by its part of the payload."""

from __future__ import annotations

from collections.abc import Sequence

from acpgate.session.v1 import session_pb2
from services.edge.sessions.feed import Event
from services.edge.sessions.log_chunks import CHUNK_CHARS, pack_relayed

HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{'


def events(first: int, count: int, text: str = "hello") -> list[Event]:
    return [Event(first + i, f'{HEAD}"eventId":{first + i},"text":"{text} {i}"}}}}', "")
            for i in range(count)]


def run(turn: int, evs: Sequence[Event]) -> tuple[int, int, Sequence[Event], int]:
    return turn, 1, evs, sum(len(e.line) for e in evs)


def lines_of(chunk: session_pb2.EventChunk) -> list[tuple[int, str]]:
    """The chunk's events as a reader gets them: (event id, line)."""
    parts = [chunk.payload] if chunk.first_event_id == chunk.last_event_id \
        else chunk.payload.split(b"\n")
    assert len(parts) == chunk.last_event_id - chunk.first_event_id + 1
    return [(chunk.first_event_id + i, (chunk.prefix + p).decode())
            for i, p in enumerate(parts)]


def test_bursts_that_follow_each_other_are_one_chunk_with_their_shared_start_once() -> None:
    a, b = events(100, 3), events(103, 4, "héllo ✓")
    chunks = pack_relayed([run(7, a), run(7, b)])
    assert len(chunks) == 1
    chunk = chunks[0]
    assert (chunk.first_event_id, chunk.last_event_id, chunk.turn_id, chunk.kind) == \
        (100, 106, 7, "update")
    assert chunk.prefix.startswith(HEAD.encode())
    assert lines_of(chunk) == [(e.event_id, e.line) for e in a + b]


def test_a_gap_in_the_ids_or_another_turn_starts_a_new_chunk() -> None:
    a, b, c = events(1, 2), events(4, 2), events(6, 2)
    chunks = pack_relayed([run(1, a), run(1, b), run(2, c)])
    assert [(ch.first_event_id, ch.last_event_id, ch.turn_id) for ch in chunks] == \
        [(1, 2, 1), (4, 5, 1), (6, 7, 2)]
    assert [pair for ch in chunks for pair in lines_of(ch)] == \
        [(e.event_id, e.line) for e in a + b + c]


def test_ids_that_do_not_follow_each_other_within_a_burst_are_cut_there() -> None:
    evs = [*events(10, 2), *events(20, 2)]
    chunks = pack_relayed([run(0, evs)])
    assert [(ch.first_event_id, ch.last_event_id) for ch in chunks] == [(10, 11), (20, 21)]


def test_a_line_holding_a_newline_goes_whole_on_its_own() -> None:
    evs = events(1, 3)
    evs[1] = Event(2, evs[1].line.replace("hello", "two\nlines"), "")
    chunks = pack_relayed([run(0, evs)])
    assert [pair for ch in chunks for pair in lines_of(ch)] == [(e.event_id, e.line)
                                                                for e in evs]
    assert all(ch.first_event_id == ch.last_event_id for ch in chunks)


def test_a_long_burst_is_cut_near_the_chunk_size_and_keeps_every_line() -> None:
    evs = events(1, 2000, "x" * 200)
    chunks = pack_relayed([run(3, evs)])
    assert len(chunks) > 1
    assert all(len(ch.payload) + len(ch.prefix) <= CHUNK_CHARS * 1.1 for ch in chunks)
    assert [pair for ch in chunks for pair in lines_of(ch)] == [(e.event_id, e.line)
                                                                for e in evs]


def test_lines_sharing_little_are_sent_without_a_prefix() -> None:
    evs = [Event(1, '{"a":1}', ""), Event(2, '{"b":2}', "")]
    (chunk,) = pack_relayed([run(0, evs)])
    assert chunk.prefix == b"" and chunk.payload == b'{"a":1}\n{"b":2}'
