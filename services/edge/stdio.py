"""``acpgate acp``: the dialect over stdin/stdout (SPEC §0, §1).

stdin lines go to :func:`serve_connection`; every message is written to stdout
as one line. EOF (or SIGTERM/SIGINT) closes every session, stops the embedded
services and returns 0 with no child process left behind.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import grpc

from services.common.config import Config
from services.common.logs import get_logger
from services.common.signals import install_stop_signals
from services.edge.connection import EdgeRuntime, open_runtime, serve_connection
from services.edge.runtime import StartServices

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


#: Bytes (pending lines plus the pipe transport's buffer) above which ``send`` waits for the
#: reader: big enough that a fast reader never makes a sender wait, small enough to bound memory.
WRITE_HIGH_WATER = 1 << 20
#: Kernel buffer asked for a stdout pipe (Linux default 64 KiB; 1 MiB is the default
#: unprivileged maximum, /proc/sys/fs/pipe-max-size).
STDOUT_PIPE_BYTES = 1 << 20
#: Allocations between young-generation collections in `acpgate acp` (CPython default 700).
GC_GEN0_THRESHOLD = 20_000
#: Young collections per older-generation collection (CPython default 10).
GC_OLDER_THRESHOLD = 20
#: How long the final flush at exit waits for a reader that stopped reading.
FINAL_FLUSH_SECS = 5.0


class LineWriter:
    """Writes lines to a pipe transport, coalescing every line of one loop iteration.

    ``send`` appends to a pending list and schedules one flush for the end of the
    current loop iteration, so a burst of updates becomes one ``write`` syscall
    instead of one per line (order is kept: this is the only writer). ``send``
    waits only when pending plus unsent bytes exceed ``high_water``: then it
    writes at once and waits until the reader has taken the transport's buffer
    below its low mark, which is the backpressure a non-reading client feels.
    """

    def __init__(self, transport: asyncio.WriteTransport, writer: asyncio.StreamWriter,
                 high_water: int = WRITE_HIGH_WATER) -> None:
        self._transport = transport
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._high_water = high_water
        self._pending: list[str] = []
        self._pending_chars = 0
        self._scheduled = False
        # The transport pauses (drain waits) at the same mark ``send`` checks against.
        transport.set_write_buffer_limits(high=high_water)

    @property
    def pending_chars(self) -> int:
        """Characters queued for the next flush (not yet handed to the transport)."""
        return self._pending_chars

    @property
    def buffered_bytes(self) -> int:
        """Bytes the transport holds that the reader has not taken yet."""
        return self._transport.get_write_buffer_size()

    async def send(self, line: str) -> None:
        """Queue one line; waits only above the high-water mark. ConnectionError once closed."""
        if self._transport.is_closing():
            raise ConnectionError("stdout closed")
        self._pending.append(line)
        self._pending_chars += len(line) + 1
        if self._pending_chars + self._transport.get_write_buffer_size() > self._high_water:
            self.flush()
            await self._writer.drain()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand every pending line to the transport in one write."""
        self._scheduled = False
        if not self._pending:
            return
        lines = self._pending
        self._pending = []
        self._pending_chars = 0
        if self._transport.is_closing():
            return  # the reader is gone: nothing can be delivered
        lines.append("")
        self._transport.write("\n".join(lines).encode("utf-8", errors="surrogateescape"))

    async def aclose(self, wait_secs: float = FINAL_FLUSH_SECS) -> None:
        """Flush and wait (bounded) until the reader has taken everything written."""
        self.flush()
        if self._transport.is_closing():
            return
        # A zero high mark makes drain() wait until the transport buffer is empty.
        self._transport.set_write_buffer_limits(high=0)
        try:
            await asyncio.wait_for(self._writer.drain(), wait_secs)
        except (TimeoutError, ConnectionError, OSError):
            pass


def _grow_pipe(fd: int, size: int) -> None:
    """Ask for a ``size``-byte kernel buffer when ``fd`` is a pipe (best effort).

    A bigger stdout pipe means fewer, larger writes and fewer wake-ups per update;
    the bytes written are the same. A file, a tty, or a refusal keeps the default.
    """
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except (OSError, ValueError):
        pass


async def _stdout_writer() -> tuple[Callable[[str], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """``(send, close)`` for stdout: a coalescing pipe writer, else a thread per line."""
    loop = asyncio.get_running_loop()
    try:
        _grow_pipe(sys.stdout.fileno(), STDOUT_PIPE_BYTES)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout.buffer)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        line_writer = LineWriter(transport, writer)
        return line_writer.send, line_writer.aclose
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

        async def close_file() -> None:
            return None

        return send_file, close_file


#: How long `acpgate acp` waits for configured services before running them itself.
CONFIGURED_SERVICES_WAIT_SECS = 3.0


def _tune_gc() -> None:
    """Collect less often while relaying: this process is `acpgate acp` and nothing else.

    Each relayed update allocates a handful of dicts (parse, rewrite, encode), so the
    default gen-0 threshold (700) ran a collection every ~100 updates, each also paying
    for every object the runtime holds. The objects alive after startup (modules, gRPC,
    the runtime) are moved out of the collector's sight with ``gc.freeze``, and young
    collections run every :data:`GC_GEN0_THRESHOLD` allocations. Cycles are still
    collected; memory stays bounded (a few MB of young objects at most).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, GC_OLDER_THRESHOLD, GC_OLDER_THRESHOLD)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.details() or ""
    return str(exc)


async def _open_runtime_for_stdio(cfg: Config, version: str,
                                  start_services: StartServices) -> EdgeRuntime:
    """Configured services if they answer, else embedded ones (SPEC §0).

    An IDE launching ``acpgate acp`` must get its handshake answered: when the
    ``[services]`` addresses do not answer, the services run embedded on the
    same data dir instead of the process dying before ``initialize``.
    """
    if not (cfg.services.session_addr or cfg.services.lifecycle_addr):
        return await open_runtime(cfg, version=version, start_services=start_services)
    try:
        return await open_runtime(cfg, version=version, start_services=start_services,
                                  health_timeout=CONFIGURED_SERVICES_WAIT_SECS)
    except (TimeoutError, OSError, grpc.aio.AioRpcError) as exc:
        log.warning("configured_services_unreachable_running_embedded", detail=_describe(exc),
                    session_addr=cfg.services.session_addr,
                    lifecycle_addr=cfg.services.lifecycle_addr)
        print("acpgate: the configured session/lifecycle services do not answer "
              f"({_describe(exc)}); running them embedded on {cfg.data_dir}", file=sys.stderr)
    embedded = replace(cfg, services=replace(cfg.services, session_addr="", lifecycle_addr=""))
    return await open_runtime(embedded, version=version, start_services=start_services)


async def run_stdio(cfg: Config, *, version: str, start_services: StartServices) -> int:
    """Serve the dialect on stdio until EOF; returns the exit code (0; 1 when nothing starts).

    ``version`` is acpgate's (both handshakes report it); ``start_services``
    runs the services ``[services]`` leaves empty, or that do not answer,
    inside this process (``acpgate.embedded.start_embedded``).
    """
    try:
        runtime = await _open_runtime_for_stdio(cfg, version, start_services)
    except (TimeoutError, OSError, grpc.aio.AioRpcError) as exc:
        log.error("services_unavailable", detail=_describe(exc))
        print(f"acpgate: cannot start the session/lifecycle services: {_describe(exc)}",
              file=sys.stderr)
        return 1
    _tune_gc()
    stop = asyncio.Event()
    remove_signals = install_stop_signals(stop, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    try:
        reader = await _stdin_reader()
        send, close_stdout = await _stdout_writer()

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

        try:
            # EOF: what was asked still gets answered (a CI runner pipes requests
            # and closes stdin); a signal cuts that short.
            await serve_connection(runtime, incoming(), send,
                                   drain_secs=float(cfg.acp.session_timeout_secs), abort=stop)
        finally:
            await close_stdout()
    finally:
        await runtime.close()
        remove_signals()
    log.info("stdio_edge_exit")
    return 0
