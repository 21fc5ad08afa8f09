"""The stdio front door's coalescing stdout writer (``services.edge.transport.stdio_pipes.LineWriter``).

Real pipes (``os.pipe``) and real asyncio pipe transports: lines written in one
loop iteration leave in one flush, in order; a reader that stops reading makes
``send`` wait with memory bounded by the high-water mark; ``aclose`` delivers
everything still pending.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from services.common.jsonrpc import read_lines
from services.edge.transport.stdio_pipes import LineWriter


class Pipe:
    """A real pipe: a LineWriter on the write end, a StreamReader on the read end."""

    def __init__(self) -> None:
        self.rfd, self.wfd = os.pipe()
        self.writer: LineWriter | None = None
        self.transport: asyncio.WriteTransport | None = None
        self.reader: asyncio.StreamReader | None = None
        self._read_transport: asyncio.ReadTransport | None = None

    async def open(self, high_water: int) -> LineWriter:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(self.wfd, "wb", buffering=0))
        stream_writer = asyncio.StreamWriter(transport, protocol, None, loop)
        self.transport = transport
        self.writer = LineWriter(transport, stream_writer, high_water=high_water)
        return self.writer

    async def start_reading(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        protocol = asyncio.StreamReaderProtocol(reader)
        self._read_transport, _ = await loop.connect_read_pipe(
            lambda: protocol, os.fdopen(self.rfd, "rb", buffering=0))
        self.reader = reader
        return read_lines(reader)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self._read_transport is not None:
            self._read_transport.close()
        else:
            os.close(self.rfd)


@pytest.fixture
async def pipe() -> AsyncIterator[Pipe]:
    p = Pipe()
    try:
        yield p
    finally:
        p.close()
        await asyncio.sleep(0)


async def test_first_line_at_once_rest_of_the_iteration_in_one_flush_in_order(pipe: Pipe) -> None:
    writer = await pipe.open(high_water=1 << 20)
    assert pipe.transport is not None
    writes: list[bytes] = []
    real_write = pipe.transport.write

    def counting_write(data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        real_write(data)

    pipe.transport.write = counting_write  # type: ignore[method-assign]
    for i in range(500):
        await writer.send(f'{{"n":{i}}}')
    # The first line went out at once (the pipe was idle); the rest wait for the end of
    # this loop iteration.
    assert writes == [b'{"n":0}\n']
    assert writer.pending_chars > 0
    await asyncio.sleep(0)
    assert len(writes) == 2
    assert writer.pending_chars == 0
    # The next iteration's first line goes out at once again.
    await writer.send('{"n":500}')
    assert len(writes) == 3
    lines = await pipe.start_reading()
    got = [await anext(lines) for _ in range(501)]
    assert got == [f'{{"n":{i}}}' for i in range(501)]


async def test_non_reading_client_blocks_send_with_bounded_memory(pipe: Pipe) -> None:
    high_water = 64 * 1024
    writer = await pipe.open(high_water=high_water)
    line = "x" * 1000
    total = 4000  # ~4 MB: far more than the pipe plus the high-water mark can hold
    sent = 0
    peak = 0

    async def produce() -> None:
        nonlocal sent, peak
        for i in range(total):
            await writer.send(f"{i:06d}{line}")
            sent += 1
            peak = max(peak, writer.pending_chars + writer.buffered_bytes)

    producer = asyncio.create_task(produce())
    # Wait until the producer is stuck on the full pipe (it cannot finish: nobody reads).
    last = -1
    for _ in range(400):
        await asyncio.sleep(0.005)
        if sent == last and writer.buffered_bytes > 0:
            break
        last = sent
    assert not producer.done()
    assert sent < total
    # Memory held by the writer stays within the mark plus one line.
    assert peak <= high_water + len(line) + 8
    assert writer.pending_chars + writer.buffered_bytes <= high_water + len(line) + 8

    # Once the client reads, everything arrives, in order, and the producer finishes.
    lines = await pipe.start_reading()
    got = 0
    async for text in lines:
        assert text.startswith(f"{got:06d}")
        got += 1
        if got == total:
            break
    await asyncio.wait_for(producer, 10.0)
    assert got == total


async def test_aclose_delivers_pending_lines(pipe: Pipe) -> None:
    writer = await pipe.open(high_water=1 << 20)
    await writer.send("first")
    await writer.send("last")
    assert writer.pending_chars > 0
    lines = await pipe.start_reading()
    await writer.aclose(wait_secs=5.0)
    assert writer.pending_chars == 0 and writer.buffered_bytes == 0
    assert [await anext(lines), await anext(lines)] == ["first", "last"]


async def test_send_after_the_reader_is_gone_raises(pipe: Pipe) -> None:
    writer = await pipe.open(high_water=1024)
    await pipe.start_reading()
    assert pipe._read_transport is not None
    pipe._read_transport.close()
    await asyncio.sleep(0)
    with pytest.raises(ConnectionError):
        for _ in range(10_000):
            await writer.send("y" * 100)
            await asyncio.sleep(0)


async def test_room_waits_while_the_backlog_is_over_the_mark(pipe: Pipe) -> None:
    """The stdio front door reads its next line only once ``room`` returns."""
    high_water = 64 * 1024
    writer = await pipe.open(high_water=high_water)
    assert await asyncio.wait_for(writer.room(), 1.0) is None  # nothing pending: room
    batch = [f"{i:06d}" + "y" * 1000 for i in range(400)]  # ~400 KB: more than pipe + mark
    senders = [asyncio.create_task(writer.send_many(batch[i:i + 100]))
               for i in range(0, 400, 100)]
    room = asyncio.create_task(writer.room())
    await asyncio.sleep(0.2)
    assert not room.done() and writer.backlog > high_water  # stuck: no room for more input
    lines = await pipe.start_reading()
    got = [await anext(lines) for _ in range(400)]
    assert got == batch  # each batch together, all of them in order
    await asyncio.wait_for(room, 10.0)
    await asyncio.wait_for(asyncio.gather(*senders), 10.0)
