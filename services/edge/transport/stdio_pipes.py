"""Newline-delimited messages over stdin/stdout pipes (SPEC §1), for ``acpgate acp``.

``read_lines`` (``services.common.jsonrpc``) splits stdin into lines without a
per-line limit on the stream (an over-long line becomes one parse error instead
of killing the reader); :class:`LineWriter` coalesces every line written in one loop
iteration into one ``write`` and pushes back on a client that stops reading.

A client that stops reading stdout must not grow memory either: the stdin
reader buffers little ahead (:data:`STDIN_READ_AHEAD`), and the front door
reads the next line only once :meth:`LineWriter.room` says the output backlog
is under its bound — so a stuck stdout stops stdin.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

#: What the stdin reader buffers ahead of the dialect before it stops reading the pipe
#: (asyncio pauses the transport at twice a StreamReader's limit). Lines of any length
#: still pass (read_lines joins chunks itself); this only bounds the read-ahead, so that
#: when the dialect stops taking lines — its output is stuck — stdin stops moving too.
STDIN_READ_AHEAD = 256 * 1024


async def stdin_reader() -> asyncio.StreamReader:
    """A stream reader over this process's stdin pipe, for ``read_lines``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIN_READ_AHEAD)
    protocol = asyncio.StreamReaderProtocol(reader)
    await loop.connect_read_pipe(lambda: protocol, sys.stdin.buffer)
    return reader


#: Bytes (pending lines plus the pipe transport's buffer) above which ``send`` waits for the
#: reader: big enough that a fast reader never makes a sender wait, small enough to bound memory.
WRITE_HIGH_WATER = 1 << 20
#: Kernel buffer asked for a stdout pipe (Linux default 64 KiB; 1 MiB is the default
#: unprivileged maximum, /proc/sys/fs/pipe-max-size).
STDOUT_PIPE_BYTES = 1 << 20
#: How long the final flush at exit waits for a reader that stopped reading.
FINAL_FLUSH_SECS = 5.0


class LineWriter:
    """Writes lines to a pipe transport, coalescing every line of one loop iteration.

    The first ``send`` of a loop iteration into an idle pipe (nothing buffered) writes at
    once; later ones, and any while the pipe is backed up, are appended to a pending list
    that one flush at the end of the iteration writes, so a burst of updates becomes one
    ``write`` syscall instead of one per line (order is kept: this is the only writer). ``send``
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

    @property
    def backlog(self) -> int:
        """Bytes (about) written but not yet taken by the reader: pending plus buffered."""
        return self._pending_chars + self._transport.get_write_buffer_size()

    async def send(self, line: str) -> None:
        """Queue one line; waits only above the high-water mark. ConnectionError once closed."""
        if self._transport.is_closing():
            raise ConnectionError("stdout closed")
        self._pending.append(line)
        self._pending_chars += len(line) + 1
        await self._pushed()

    async def send_many(self, lines: Sequence[str]) -> None:
        """Queue ``lines`` in order and together (no other line between them); as ``send``."""
        if self._transport.is_closing():
            raise ConnectionError("stdout closed")
        self._pending.extend(lines)
        self._pending_chars += sum(map(len, lines)) + len(lines)
        await self._pushed()

    async def _pushed(self) -> None:
        if self.backlog > self._high_water:
            self.flush()
            await self._writer.drain()
        elif not self._scheduled:
            # The flush at the end of this iteration coalesces whatever else is sent in it.
            self._scheduled = True
            self._loop.call_soon(self.flush)
            if not self._transport.get_write_buffer_size():
                # The first lines of an iteration into an idle pipe go out at once: waiting
                # for the flush would cost a paced update one more loop iteration
                # (bench/PROFILE.md).
                self._write_pending()

    async def room(self) -> None:
        """Wait while the backlog is over the high-water mark (the reader stopped reading).

        The stdio front door awaits this before it reads the next request, so a
        client that does not read its answers cannot make the edge hold them.
        """
        while self.backlog > self._high_water and not self._transport.is_closing():
            self.flush()
            try:
                await self._writer.drain()
            except (ConnectionError, OSError):
                return

    def flush(self) -> None:
        """Hand every pending line to the transport in one write."""
        self._scheduled = False
        if self._pending:
            self._write_pending()

    def _write_pending(self) -> None:
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


@dataclass(frozen=True)
class Stdout:
    """How the stdio front door writes: one line, several together, the backlog gate, close."""

    send: Callable[[str], Awaitable[None]]
    #: ``None`` when the writer cannot write several lines together (the dialect serializes).
    send_many: Callable[[list[str]], Awaitable[None]] | None
    room: Callable[[], Awaitable[None]]
    close: Callable[[], Awaitable[None]]


async def _always_room() -> None:
    return None


async def stdout_writer() -> Stdout:
    """stdout as a coalescing pipe writer, else (a file, a tty) a thread per line."""
    loop = asyncio.get_running_loop()
    try:
        _grow_pipe(sys.stdout.fileno(), STDOUT_PIPE_BYTES)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout.buffer)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        line_writer = LineWriter(transport, writer)
        return Stdout(line_writer.send, line_writer.send_many, line_writer.room,
                      line_writer.aclose)
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

        # Each send waits for its write: nothing piles up that a gate would have to stop.
        return Stdout(send_file, None, _always_room, _always_room)
