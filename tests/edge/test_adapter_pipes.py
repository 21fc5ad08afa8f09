"""The edge holding an adapter's pipes itself: services/edge/adapter/pipes.py and
the redemption in services/edge/backends/fds.py.

Real pipes stand in for the adapter's: what the lifecycle service had read comes first
(whole lines, then the start of a line the pipe finishes), an over-long line is dropped
and ends the reading, a pipe held open after the adapter's exit is left after a silence,
and what the edge writes reaches stdin in order. A redemption that never happened (no
socket, a refusal) falls back to the stream; one that broke half-way is a lost link.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.config import PathsSection, ServicesSection, load_config, with_overrides
from services.common.grpc_auth import GrpcSecurity
from services.edge.adapter import pipes as adapter_pipes
from services.edge.adapter.pipes import AdapterPipes, PipesEnd
from services.edge.backends.fds import FdDialer, FdGrant, PipesLost, PipesNotTaken, TakenPipes


class Adapter:
    """The adapter's ends of two pipes, and the edge's (as :class:`TakenPipes`)."""

    def __init__(self, lines: bytes = b"", partial: bytes = b"", *, dropping: bool = False,
                 too_long: int = 0) -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        self.stdin, self.stdout = in_r, out_w
        self.taken = TakenPipes(in_w, out_r, lines, partial, dropping, too_long)

    def write(self, data: bytes) -> None:
        os.write(self.stdout, data)

    def close(self) -> None:
        for fd in (self.stdin, self.stdout):
            if fd >= 0:
                os.close(fd)
        self.stdin = self.stdout = -1


@pytest.fixture
async def adapter() -> AsyncIterator[Adapter]:
    a = Adapter(b"one\ntwo\n", b"thr")
    yield a
    a.close()


async def start(taken: TakenPipes, seen: asyncio.Event | None = None, *, when: str = "",
                ) -> tuple[AdapterPipes, list[list[str]]]:
    """The edge's pipes, open; the batches they deliver (``seen`` is set once ``when`` came)."""
    batches: list[list[str]] = []

    async def deliver(lines: list[str]) -> None:
        batches.append(lines)
        if seen is not None and when in lines:
            seen.set()

    pipes = AdapterPipes(taken, deliver)
    await pipes.open()
    return pipes, batches


async def test_what_was_read_comes_first_then_the_pipe(adapter: Adapter) -> None:
    pipes, batches = await start(adapter.taken)
    adapter.write(b"ee\nfour\n")
    adapter.write(b"five")
    os.close(adapter.stdout)
    adapter.stdout = -1
    assert await asyncio.wait_for(pipes.run(), 10) == PipesEnd()
    assert [line for batch in batches for line in batch] == ["one", "two", "three", "four",
                                                             "five"]
    assert batches[0] == ["one", "two"]  # the lines read already: one batch
    pipes.close()


async def test_lines_written_reach_stdin_in_order(adapter: Adapter) -> None:
    pipes, _ = await start(adapter.taken)
    for i in range(100):
        pipes.write(f"line {i}")
    pipes.close_stdin()
    data = b""
    loop = asyncio.get_running_loop()
    while chunk := await loop.run_in_executor(None, os.read, adapter.stdin, 65536):
        data += chunk
    assert data == b"".join(f"line {i}\n".encode() for i in range(100))
    pipes.close()


async def test_an_over_long_line_is_dropped_and_ends_the_reading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter_pipes, "MAX_ADAPTER_LINE_BYTES", 1000)
    a = Adapter()
    try:
        pipes, batches = await start(a.taken)
        # Longer than a pipe holds: read in several chunks, held past the limit, dropped.
        writing = asyncio.ensure_future(asyncio.to_thread(
            a.write, b"before\n" + b"L" * 300_000 + b"\nafter\n"))
        assert await asyncio.wait_for(pipes.run(), 10) == PipesEnd(too_long=1000)
        pipes.close()  # the writer gets EPIPE for what is left
        with contextlib.suppress(BrokenPipeError):
            await writing
        assert [line for batch in batches for line in batch] == ["before"]
    finally:
        a.close()


async def test_the_rest_of_a_line_being_dropped_is_dropped() -> None:
    a = Adapter(b"kept\n", dropping=True)
    try:
        pipes, batches = await start(a.taken)
        a.write(b"rest of the long line\nnext\n")
        a.close()
        assert await asyncio.wait_for(pipes.run(), 10) == PipesEnd()
        assert batches == [["kept"], ["next"]]
        pipes.close()
    finally:
        a.close()


async def test_an_over_long_line_the_lifecycle_service_dropped_ends_it_after_its_lines() -> None:
    a = Adapter(b"kept\n", too_long=1)
    try:
        pipes, batches = await start(a.taken)
        a.write(b"never read\n")
        assert (await asyncio.wait_for(pipes.run(), 10)).too_long
        assert batches == [["kept"]]
        pipes.close()
    finally:
        a.close()


async def test_after_the_exit_a_pipe_held_open_is_left_after_a_silence(
        adapter: Adapter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter_pipes, "EXIT_DRAIN_SECS", 0.2)
    three = asyncio.Event()
    pipes, _ = await start(adapter.taken, three, when="three")
    run = asyncio.ensure_future(pipes.run())
    adapter.write(b"ee\n")
    await asyncio.wait_for(three.wait(), 10)
    assert not run.done()  # before the exit, a silent pipe is simply waited for
    pipes.exit_known()  # a descendant still holds the write end (self.stdout)
    assert await asyncio.wait_for(run, 10) == PipesEnd()
    pipes.close()


# ---------------------------------------------------------------------- redemption


def short_path(name: str) -> str:
    return os.path.join(tempfile.mkdtemp(prefix="fdt-", dir="/tmp"), name)


GRANT = FdGrant(grant_id="g" * 32, generation=1)


async def fake_fd_socket(path: str, answer: bytes | None) -> asyncio.AbstractServer:
    """A stand-in fd socket: reads the request, then sends ``answer`` (None: closes)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        if answer is not None:
            writer.write(answer)
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(serve, path)


async def test_no_fd_socket_means_the_stream() -> None:
    dialer = FdDialer(short_path("none.fds.sock"), "credential")
    with pytest.raises(PipesNotTaken):
        await dialer.redeem("lease", GRANT)


async def test_a_refusal_means_the_stream() -> None:
    path = short_path("l.fds.sock")
    server = await fake_fd_socket(path, b'{"v":1,"ok":false,"error":"refused"}\n')
    try:
        with pytest.raises(PipesNotTaken, match="refused"):
            await FdDialer(path, "credential").redeem("lease", GRANT)
    finally:
        server.close()


@pytest.mark.parametrize("answer", [None, b"garbage\n", b'{"v":1,"ok":true,"lines":0,'
                                                         b'"partial":0,"too_long":0}\n'])
async def test_a_broken_answer_after_the_request_is_a_lost_link(answer: bytes | None) -> None:
    path = short_path("l.fds.sock")
    server = await fake_fd_socket(path, answer)  # the last: "ok" without descriptors
    try:
        with pytest.raises(PipesLost):
            await FdDialer(path, "credential").redeem("lease", GRANT)
    finally:
        server.close()


def test_the_dialer_is_there_only_where_pipes_can_come(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("")
    cfg = with_overrides(load_config(tmp_path, environ={}),
                         paths=PathsSection(data_dir=str(tmp_path / "data")))
    sec = GrpcSecurity(token="t" * 64)
    dialer = FdDialer.of(cfg, "unix:/run/x/lifecycle.sock", sec)
    assert dialer is not None and dialer.path == "/run/x/lifecycle.fds.sock"
    assert "t" * 64 not in repr(dialer)
    assert FdDialer.of(cfg, "127.0.0.1:7000", sec) is None  # another host, or compose on TCP
    assert FdDialer.of(cfg, "unix:/run/x/lifecycle.sock", None) is None
    assert FdDialer.of(cfg, "unix:/" + "x" * 120 + ".sock", sec) is None  # too long a path
    grpc_only = with_overrides(cfg, services=ServicesSection(data_path="grpc"))
    assert FdDialer.of(grpc_only, "unix:/run/x/lifecycle.sock", sec) is None
