"""AdapterChannel reads adapter stdout in chunks and splits lines (services/lifecycle/attach/channel.py).

A real child process writes bytes to a real pipe, cut at awkward places (inside
a UTF-8 character, between ``\\r`` and ``\\n``, across the 64 KiB read size);
the channel must deliver exactly the lines a per-line reader would, drop an
over-long line without losing its neighbours, and keep its buffer bounded.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import sys
from pathlib import Path

import pytest

from services.lifecycle.attach import channel as attach
from services.lifecycle.attach.channel import READ_CHUNK_BYTES, AdapterChannel
from services.lifecycle.attach.stdout_batches import Block, take_batch

#: Writes each argv file's bytes as a separate, flushed write, with a pause between them.
WRITER = """
import sys, time
out = sys.stdout.buffer
for path in sys.argv[1:]:
    out.write(open(path, "rb").read())
    out.flush()
    time.sleep(0.01)
"""


def expected_lines(data: bytes) -> list[str]:
    """What a per-line reader delivers: split on newlines, strip CR, skip blanks."""
    out = []
    for raw in data.split(b"\n"):
        line = raw.rstrip(b"\r").decode("utf-8", "replace")
        if line:
            out.append(line)
    return out


async def open_channel(tmp_path: Path, pieces: list[bytes], **kwargs: int) -> AdapterChannel:
    paths = []
    for i, piece in enumerate(pieces):
        path = tmp_path / f"piece{i}"
        path.write_bytes(piece)
        paths.append(str(path))
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, *paths, stdin=in_r, stdout=out_w)
    os.close(in_r)
    os.close(out_w)
    report = asyncio.StreamReader()
    report.feed_data(b'{"event":"started","adapter_pid":%d,"pgid":%d}\n' % (process.pid, process.pid))
    report.feed_eof()
    return AdapterChannel("lease-chunks", process, report, tmp_path / "stderr.log",
                          stdin_fd=in_w, stdout_fd=out_r, **kwargs)


async def drain(channel: AdapterChannel) -> list[str]:
    got: list[str] = []
    with channel.attach():
        while (batch := await asyncio.wait_for(channel.next_batch(), 10.0)) is not None:
            got.extend(batch)
    await channel.aclose()
    return got


async def test_awkward_cuts_give_the_same_lines_as_a_line_reader(tmp_path: Path) -> None:
    euro = "€".encode()  # three bytes
    big = b"{" + b"z" * (3 * READ_CHUNK_BYTES) + b"}"
    pieces = [
        b'{"a":1}\n{"b":"' + euro[:1],  # cut inside a UTF-8 character
        euro[1:] + b'"}\r',  # cut between CR and LF
        b"\n\n\n",  # blank lines are skipped
        b"bad \xff\xfe utf-8\n",  # replaced, not fatal
        b"x" * (READ_CHUNK_BYTES - 3) + b"\nnext",  # a line ending right at the read size
        b" line\n" + big[:1000],
        big[1000:] + b"\n",  # a line far longer than one read
        "ünïcödé\n".encode() * 5000,  # many lines in few reads
        b"no newline at the end",
    ]
    channel = await open_channel(tmp_path, pieces)
    got = await drain(channel)
    assert got == expected_lines(b"".join(pieces))
    assert got[-1] == "no newline at the end"
    assert channel.exit_info is not None and channel.exit_info.exit_code == 0


async def test_over_long_line_is_dropped_and_its_neighbours_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attach, "MAX_LINE_BYTES", 2 * READ_CHUNK_BYTES)
    long_line = b"L" * (5 * READ_CHUNK_BYTES)
    just_fits = b"F" * (2 * READ_CHUNK_BYTES)
    pieces = [
        b"before\n" + long_line[:100],
        long_line[100:] + b"\nafter\n",
        b"partial start " + just_fits[:10],
        just_fits[10:] + b"\n",  # 2 chunks + 14 bytes: also over the limit, dropped
        just_fits[:-20] + b"\nlast\n",  # under the limit: kept
        b"P" * (2 * READ_CHUNK_BYTES - 10),  # held whole, still under the limit ...
        b"Q" * 100 + b"\nok\n",  # ... until the chunk with its newline takes it over
    ]
    channel = await open_channel(tmp_path, pieces)
    got = await drain(channel)
    assert got == ["before", "after", just_fits[:-20].decode(), "last", "ok"]
    assert channel.take_too_long() == 3 and channel.take_too_long() == 0  # for the attacher


async def test_buffer_stays_bounded_while_nobody_reads(tmp_path: Path) -> None:
    max_buffer = 20_000
    lines = [f"{i:06d} " + "p" * 93 for i in range(20_000)]  # ~2 MB
    data = "".join(line + "\n" for line in lines).encode()
    channel = await open_channel(tmp_path, [data], max_buffer_bytes=max_buffer)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while channel.buffered_bytes < max_buffer:
        assert loop.time() < deadline, "the buffer never filled"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    # Reading stopped at the bound: at most one line over it, and the writer is stuck.
    assert channel.buffered_bytes < max_buffer + 101
    assert channel.process.returncode is None
    got = await drain(channel)
    assert got == lines


async def test_batches_keep_order_and_bound_across_read_blocks(tmp_path: Path) -> None:
    """Read blocks are batched whole or cut at the bound: every line once, in order, each
    batch within ``max_batch_bytes`` (an over-long line alone)."""
    lines = [("w" * (i * 37 % 300 + 1)) for i in range(3000)]
    lines[700] = "O" * 5000  # one line over the bound: a batch of its own
    pieces = [b"".join(f"{line}\n".encode() for line in lines[i:i + 250])
              for i in range(0, len(lines), 250)]
    channel = await open_channel(tmp_path, pieces, max_batch_bytes=4096)
    await asyncio.sleep(0.5)  # let the writer finish: the buffer then holds many read blocks
    batches: list[list[str]] = []
    with channel.attach():
        while (batch := await asyncio.wait_for(channel.next_batch(), 10.0)) is not None:
            batches.append(batch)
    await channel.aclose()
    assert [line for batch in batches for line in batch] == lines
    assert ["O" * 5000] in batches
    rest = iter(lines)
    for batch in batches:
        size = sum(map(len, batch))
        assert batch and (size <= 4096 or len(batch) == 1)
        assert batch == [next(rest) for _ in batch]
    assert channel.buffered_bytes == 0


def _per_line_batches(lines: list[str], max_size: int) -> list[list[str]]:
    """The per-line batching take_batch replaced: greedy, at least one line per batch."""
    queue = collections.deque(lines)
    out = []
    while queue:
        batch: list[str] = []
        size = 0
        while queue and (not batch or size + len(queue[0]) <= max_size):
            batch.append(queue.popleft())
            size += len(batch[-1])
        out.append(batch)
    return out


def test_take_batch_gives_the_per_line_batches() -> None:
    rnd = random.Random(15)
    for _ in range(3000):
        max_size = rnd.choice([1, 5, 10, 50, 200])
        read = [["x" * rnd.randint(1, 60) for _ in range(rnd.randint(1, 12))]
                for _ in range(rnd.randint(1, 6))]
        blocks: collections.deque[Block] = collections.deque(
            (lines, sum(map(len, lines))) for lines in read)
        got = []
        while blocks:
            batch, size = take_batch(blocks, max_size)
            assert size == sum(map(len, batch))
            got.append(batch)
        assert got == _per_line_batches([line for lines in read for line in lines], max_size)
