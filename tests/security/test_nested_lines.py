"""Lines nested deeper than the JSON parser goes, sent where acpgate's processes read JSON
lines from a local peer: the lifecycle service's fd socket, an edge worker's hand-over
socket and serve's handover socket.

Python's parser gives up on such a line with a RecursionError, not a ValueError; each
reader takes it for what it is — a malformed line (refused, the connection dropped) —
and never lets it out of the exchange as an unexpected error.
"""

from __future__ import annotations

import socket

import pytest

from acpgate.handover_wire import MAX_MESSAGE_BYTES as HANDOVER_MAX
from acpgate.handover_wire import Channel, HandoverError
from services.common.fd_channel import MAX_MESSAGE_BYTES as FD_MAX
from services.common.fd_channel import parse_header as parse_fd_header
from services.common.fd_channel import parse_request
from services.edge.transport.handoff.wire import MAX_HEADER_BYTES
from services.edge.transport.handoff.wire import parse_header as parse_handoff_header


def _nested(limit: int) -> list[bytes]:
    """Lines of at most ``limit`` bytes, each nested as deep as it can be."""
    depth = limit - 1
    return [b"[" * depth + b"\n", b"{\"a\":" * (depth // 5) + b"\n",
            b"[" * (depth // 2) + b"]" * (depth // 2) + b"\n"]


def test_the_fd_socket_takes_a_nested_line_for_no_request() -> None:
    for line in _nested(FD_MAX):
        assert parse_request(line) is None
        assert parse_fd_header(line) is None


def test_a_workers_hand_over_takes_a_nested_line_for_no_header() -> None:
    for line in _nested(MAX_HEADER_BYTES):
        assert parse_handoff_header(line, b"k" * 32, 1) is None


@pytest.mark.timeout(30)
async def test_serves_handover_takes_a_nested_line_for_a_malformed_message() -> None:
    for line in _nested(HANDOVER_MAX):
        ours, theirs = socket.socketpair()
        try:
            theirs.sendall(line)
            with pytest.raises(HandoverError):
                await Channel(ours).recv(5)
        finally:
            ours.close()
            theirs.close()
