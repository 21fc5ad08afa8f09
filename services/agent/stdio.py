"""The process's stdin/stdout as an asyncio line stream, without non-blocking fds.

stdin is read and stdout written by worker threads with plain blocking I/O.
Switching the fds to non-blocking mode (``connect_read_pipe``) would leak into
stderr and the terminal when they share a file description. The stdin thread
hands its chunks over through a small bounded queue (:class:`StdinChunks`): when
the agent does not keep up — a 100 MB line is skipped only as fast as it is read
— the thread stops reading instead of the agent buffering the pipe.

stdout writes are coalesced like the edge's ``LineWriter``: the lines written
while the writer thread is busy go out together in its next ``write``, so a
burst of updates costs one executor hop and one syscall, not one per line.
A writer waits only when more than :data:`WRITE_HIGH_WATER` bytes are queued.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from services.common.jsonrpc import READ_CHUNK_BYTES

#: Queued stdout bytes above which ``write_line`` waits for the writer thread.
WRITE_HIGH_WATER = 1 << 20
#: stdin chunks (of at most READ_CHUNK_BYTES) read ahead of the agent at most.
STDIN_READ_AHEAD_CHUNKS = 16


class StdinChunks:
    """stdin's chunks, from the reading thread to the event loop through a bounded queue:
    a :class:`~services.common.jsonrpc.ChunkReader` for ``read_lines``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=STDIN_READ_AHEAD_CHUNKS)
        self._eof = False

    def put(self, chunk: bytes) -> bool:
        """From the thread: queue ``chunk`` (b"" = EOF), waiting for room; False once the
        loop is gone."""
        put = self._queue.put(chunk)
        try:
            done = asyncio.run_coroutine_threadsafe(put, self._loop)
        except RuntimeError:  # the loop is closed
            put.close()
            return False
        try:
            done.result()
        except (RuntimeError, concurrent.futures.CancelledError):
            return False
        return True

    async def read(self, n: int = -1, /) -> bytes:
        """The next chunk as read (``n`` is not used: chunks are small), b"" at EOF."""
        if self._eof:
            return b""
        chunk = await self._queue.get()
        self._eof = not chunk
        return chunk


class StdioLines:
    """A StreamReader fed from stdin by a daemon thread, and a serial stdout writer."""

    def __init__(self, stdin: BinaryIO | None = None, stdout_fd: int | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self.reader = StdinChunks(self._loop)
        # Raw fd reads, not the BufferedReader: a daemon thread blocked inside
        # the buffered reader holds its lock, and interpreter shutdown then
        # aborts the process (SIGABRT) instead of exiting cleanly.
        self._in_fd = (stdin if stdin is not None else sys.stdin).fileno()
        self._out_fd = stdout_fd if stdout_fd is not None else sys.stdout.fileno()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="acp-stdout")
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flusher: asyncio.Task[None] | None = None
        self._room = asyncio.Event()
        self._room.set()
        self._failed: BaseException | None = None
        # A daemon thread: a blocked read must never keep the process alive at exit.
        self._thread = threading.Thread(target=self._pump, name="acp-stdin", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                chunk = os.read(self._in_fd, READ_CHUNK_BYTES)
                if not chunk or not self.reader.put(chunk):
                    break
        except (OSError, ValueError):
            pass
        finally:
            self.reader.put(b"")  # EOF (nothing, when the loop is already closed)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._out_fd, view)
            view = view[written:]

    async def write_line(self, data: bytes) -> None:
        """Queue one already-encoded line for stdout, in order (concurrent callers never
        interleave: each line is queued whole); waits only above the high-water mark.
        ConnectionError once a write failed or the writer closed."""
        if self._failed is not None:
            raise ConnectionError("stdout closed") from self._failed
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._flusher is None:
            self._flusher = self._loop.create_task(self._flush())
        while self._pending_bytes > WRITE_HIGH_WATER and self._failed is None:
            self._room.clear()
            await self._room.wait()

    async def _flush(self) -> None:
        """Hand everything queued to the writer thread, one join per write, until empty."""
        try:
            while self._pending:
                batch = b"".join(self._pending)
                self._pending.clear()
                self._pending_bytes = 0
                self._room.set()
                await self._loop.run_in_executor(self._writer, self._write_all, batch)
        except (OSError, RuntimeError) as exc:  # a closed pipe, or the writer shut down
            self._failed = exc
            self._pending.clear()
            self._room.set()
        finally:
            self._flusher = None

    def close(self) -> None:
        """Stop the writer thread; what is still queued is written first (blocking)."""
        self._writer.shutdown(wait=True)
        if self._pending and self._failed is None:
            batch = b"".join(self._pending)
            self._pending.clear()
            try:
                self._write_all(batch)
            except OSError as exc:
                self._failed = exc
        self._failed = self._failed or ConnectionError("stdout writer closed")
