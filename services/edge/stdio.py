"""``acpgate acp``: the dialect over stdin/stdout (SPEC §0, §1).

stdin lines go to :func:`serve_connection`; every message is written to stdout
as one line. EOF (or SIGTERM/SIGINT) closes every session, stops the embedded
services and returns 0 with no child process left behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from services.common.config import Config
from services.common.logs import get_logger
from services.common.signals import install_stop_signals
from services.edge.connection import open_runtime, serve_connection

log = get_logger("edge.stdio")

#: A line longer than this (a 10 MiB blob is ~14 MiB of base64) is answered with a parse error.
MAX_LINE_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 16
#: Stands in for an over-long line: not JSON, so it gets the -32700 answer.
OVERSIZE_LINE = "\x00line too long"


async def read_lines(reader: asyncio.StreamReader,
                     max_line: int = MAX_LINE_BYTES) -> AsyncIterator[str]:
    """Split a byte stream into lines; an over-long line becomes one parse error."""
    buf = bytearray()
    skipping = False
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            if buf and not skipping:
                yield buf.decode("utf-8", errors="surrogateescape")
            return
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not skipping:
                    buf += chunk[start:]
                    if len(buf) > max_line:
                        buf.clear()
                        skipping = True
                        yield OVERSIZE_LINE
                break
            if skipping:
                skipping = False
            else:
                buf += chunk[start:nl]
                line = bytes(buf)
                buf.clear()
                yield line.decode("utf-8", errors="surrogateescape")
            start = nl + 1


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    protocol = asyncio.StreamReaderProtocol(reader)
    await loop.connect_read_pipe(lambda: protocol, sys.stdin.buffer)
    return reader


async def _stdout_writer() -> Callable[[str], Awaitable[None]]:
    """A ``send`` that writes one line to stdout (pipe transport, else a thread)."""
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout.buffer)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)

        async def send_pipe(line: str) -> None:
            if transport.is_closing():
                raise ConnectionError("stdout closed")
            writer.write(line.encode("utf-8", errors="surrogateescape") + b"\n")
            await writer.drain()

        return send_pipe
    except (ValueError, OSError):
        fd = sys.stdout.fileno()
        lock = asyncio.Lock()

        def write_all(data: bytes) -> None:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]

        async def send_file(line: str) -> None:
            async with lock:
                await asyncio.to_thread(write_all, line.encode("utf-8", errors="surrogateescape")
                                        + b"\n")

        return send_file


async def run_stdio(cfg: Config) -> int:
    """Serve the dialect on stdio until EOF; returns the exit code (0; 1 when services are down)."""
    try:
        runtime = await open_runtime(cfg)
    except (TimeoutError, OSError, grpc.aio.AioRpcError) as exc:
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
        log.error("services_unavailable", detail=detail)
        print(f"acpgate: cannot reach the session/lifecycle services: {detail}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    try:
        reader = await _stdin_reader()
        send = await _stdout_writer()

        async def incoming() -> AsyncIterator[str]:
            lines = read_lines(reader)
            while True:
                nxt = asyncio.ensure_future(anext(lines))
                stopper = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if nxt not in done:
                    nxt.cancel()
                    return
                try:
                    yield nxt.result()
                except StopAsyncIteration:
                    return

        await serve_connection(runtime, incoming(), send)
    finally:
        await runtime.close()
        remove_signals()
    log.info("stdio_edge_exit")
    return 0
