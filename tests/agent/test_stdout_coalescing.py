"""The built-in agent's stdout writer on real pipes: coalesced, ordered, bounded.

Lines written while the writer thread is busy go out together (one executor hop
and one ``write`` per batch, not per line), in order; a reader that stops reading
makes ``write_line`` wait above the high-water mark; a reader that is gone turns
into ConnectionError; ``close`` writes what is still queued.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import pytest

from services.agent import stdio
from services.agent.stdio import StdioLines


class Pipes:
    """A stdin pipe (kept open, unused) and a stdout pipe the test reads."""

    def __init__(self) -> None:
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.stdin = os.fdopen(self.in_r, "rb", buffering=0)

    def read_all(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = os.read(self.out_r, 1 << 16)
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def close(self) -> None:
        for fd in (self.in_w, self.out_r, self.out_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.stdin.close()


@pytest.fixture
def pipes() -> Iterator[Pipes]:
    p = Pipes()
    yield p
    p.close()


def counting(lines: StdioLines) -> list[int]:
    """Record the size of every write the writer thread makes (a spy on the real write)."""
    sizes: list[int] = []
    real = lines._write_all

    def write_all(data: bytes) -> None:
        sizes.append(len(data))
        real(data)
    lines._write_all = write_all  # type: ignore[method-assign]
    return sizes


async def test_a_burst_is_written_in_few_writes_and_in_order(pipes: Pipes) -> None:
    lines = StdioLines(stdin=pipes.stdin, stdout_fd=pipes.out_w)
    sizes = counting(lines)
    payload = [f'{{"seq":{i}}}\n'.encode() for i in range(2000)]
    reader = asyncio.create_task(asyncio.to_thread(pipes.read_all, sum(map(len, payload))))
    for line in payload:
        await lines.write_line(line)
    assert await asyncio.wait_for(reader, 20) == b"".join(payload)
    assert len(sizes) <= 3, sizes  # the first line, then everything queued meanwhile
    lines.close()


async def test_a_reader_that_stops_reading_makes_writers_wait(
        pipes: Pipes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "WRITE_HIGH_WATER", 256 * 1024)
    lines = StdioLines(stdin=pipes.stdin, stdout_fd=pipes.out_w)
    line = b"x" * (64 * 1024 - 1) + b"\n"
    total = 64  # 4 MiB: far more than the pipe and the high-water mark hold
    written = 0

    async def writer() -> None:
        nonlocal written
        for _ in range(total):
            await lines.write_line(line)
            written += 1
    task = asyncio.create_task(writer())
    await asyncio.sleep(0.5)
    assert not task.done()  # nobody reads: it waits instead of queueing everything
    assert lines._pending_bytes <= stdio.WRITE_HIGH_WATER + len(line)
    data = await asyncio.to_thread(pipes.read_all, total * len(line))
    await asyncio.wait_for(task, 20)
    assert data == line * total and written == total
    lines.close()


async def test_a_gone_reader_is_a_connection_error(pipes: Pipes) -> None:
    lines = StdioLines(stdin=pipes.stdin, stdout_fd=pipes.out_w)
    os.close(pipes.out_r)
    with pytest.raises(ConnectionError):
        for _ in range(100):  # the first write fails in the thread; a later call says so
            await lines.write_line(b"{}\n")
            await asyncio.sleep(0.01)
    lines.close()


async def test_close_writes_what_is_still_queued(pipes: Pipes) -> None:
    lines = StdioLines(stdin=pipes.stdin, stdout_fd=pipes.out_w)
    gate = threading.Event()
    real = lines._write_all

    def slow(data: bytes) -> None:
        gate.wait(10)
        real(data)
    lines._write_all = slow  # type: ignore[method-assign]
    for i in range(10):
        await lines.write_line(f"{i}\n".encode())
    await asyncio.sleep(0.05)  # the first batch is in the (blocked) thread, the rest queued
    gate.set()
    lines.close()
    expected = b"".join(f"{i}\n".encode() for i in range(10))
    assert pipes.read_all(len(expected)) == expected
    with pytest.raises(ConnectionError):
        await lines.write_line(b"late\n")
