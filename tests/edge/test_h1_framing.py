"""The strict HTTP/1.1 framing checks beside h11: well-framed requests pass, at any split."""

from __future__ import annotations

import pytest

from services.edge.transport.h1_framing import ChunkedCheck, head_problem

GOOD_HEADS = [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /acp HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{}",
    b"POST /acp HTTP/1.1\r\nHost: x\r\ntransfer-encoding: Chunked\r\n\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n",  # not complete yet
]
BAD_HEADS = [
    b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
    b"GET / HTTP/1.1\r\nX A: 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\n\n",
    b"GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n",
]


@pytest.mark.parametrize("head", GOOD_HEADS)
def test_a_well_framed_head_passes(head: bytes) -> None:
    assert head_problem(head) is None


@pytest.mark.parametrize("head", BAD_HEADS)
def test_an_ambiguous_head_is_refused(head: bytes) -> None:
    assert head_problem(head) is not None


GOOD_BODY = b"5\r\nhello\r\n3;name=value\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"


def test_a_chunked_body_read_byte_by_byte_ends_where_it_ends() -> None:
    check = ChunkedCheck()
    for i in range(len(GOOD_BODY)):
        assert not check.done
        assert check.feed(GOOD_BODY[i:i + 1])
    assert check.done
    assert check.feed(b"GET / HTTP/1.1\r\n\r\n")  # the next request is not its business


@pytest.mark.parametrize("body", [
    b"zz\r\n", b"+3\r\nabc\r\n", b"-1\r\n", b"3\nabc\r\n", b"1\r\nabc\r\n0\r\n\r\n",
    b"0\r\n\n", b"0\r\n folded\r\n\r\n", b"1" * 20 + b"\r\n", b"3;a\rb\r\nabc\r\n",
])
def test_a_malformed_chunked_body_is_refused(body: bytes) -> None:
    check = ChunkedCheck()
    assert not check.feed(body) and check.problem
