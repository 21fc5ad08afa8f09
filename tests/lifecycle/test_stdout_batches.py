"""LineSplitter: the adapter's stdout chunks cut into line blocks (services/lifecycle/attach/stdout_batches.py).

test_attach_chunks.py drives it through a real pipe; here its contract per
chunk: what each feed returns, when an over-long line is reported, what the
end of the stream gives back.
"""

from __future__ import annotations

from services.lifecycle.attach.stdout_batches import LineSplitter


class Recorder:
    def __init__(self) -> None:
        self.too_long = 0

    def __call__(self) -> None:
        self.too_long += 1


def splitter(max_line: int = 100) -> tuple[LineSplitter, Recorder]:
    rec = Recorder()
    return LineSplitter(max_line, rec), rec


def test_whole_lines_of_a_chunk_come_back_as_one_block() -> None:
    s, rec = splitter()
    assert s.feed(b"one\ntwo\nthree\n") == ["one\ntwo\nthree"]
    assert s.end() is None and rec.too_long == 0


def test_a_line_begun_earlier_comes_back_alone_before_the_block() -> None:
    s, _ = splitter()
    assert s.feed(b"hel") == []
    assert s.feed(b"lo") == []
    assert s.feed(b"!\nnext\nrest") == ["hello!", "next"]
    assert s.feed(b"\n") == ["rest"]


def test_the_last_line_without_a_newline_is_given_at_the_end() -> None:
    s, _ = splitter()
    assert s.feed(b"a\nb") == ["a"]
    assert s.end() == "b"


def test_a_character_cut_between_chunks_decodes_whole() -> None:
    s, _ = splitter()
    e_acute = "é".encode()
    assert s.feed(b"caf" + e_acute[:1]) == []
    assert s.feed(e_acute[1:] + b"\n") == ["café"]


def test_an_over_long_line_is_dropped_once_and_its_neighbours_kept() -> None:
    s, rec = splitter(max_line=8)
    assert s.feed(b"before\nLLLLLL") == ["before"]
    assert s.feed(b"LLLLLL") == []  # 12 bytes held: over the bound, reported, dropped
    assert rec.too_long == 1
    assert s.feed(b"LLLLLLLLLLLL") == []  # still inside it: not reported again
    assert s.feed(b"LL\nafter\n") == ["after"]
    assert rec.too_long == 1
    assert s.end() is None


def test_a_held_line_pushed_over_the_bound_by_its_end_is_dropped() -> None:
    s, rec = splitter(max_line=8)
    assert s.feed(b"PPPPPP") == []  # 6 bytes: within the bound, held
    assert s.feed(b"QQQ\nok\n") == ["ok"]  # 9 bytes with its end: dropped
    assert rec.too_long == 1


def test_a_held_line_exactly_at_the_bound_is_kept() -> None:
    s, rec = splitter(max_line=8)
    assert s.feed(b"PPPPP") == []
    assert s.feed(b"PPP\n") == ["PPPPPPPP"]
    assert rec.too_long == 0


def test_an_over_long_unterminated_end_of_stream_is_not_given_back() -> None:
    s, rec = splitter(max_line=4)
    assert s.feed(b"xx\nyy") == ["xx"]
    assert s.feed(b"yyyy") == []
    assert rec.too_long == 1
    assert s.end() is None
