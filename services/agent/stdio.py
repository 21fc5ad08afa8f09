"""The process's stdin/stdout as an asyncio line stream, without non-blocking fds.

stdin is read and stdout written by worker threads with plain blocking I/O.
Switching the fds to non-blocking mode (``connect_read_pipe``) would leak into
stderr and the terminal when they share a file description.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from services.common.jsonrpc import MAX_LINE_BYTES


class StdioLines:
    """A StreamReader fed from stdin by a daemon thread, and a serial stdout writer."""

    def __init__(self, stdin: BinaryIO | None = None, stdout_fd: int | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self.reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        # Raw fd reads, not the BufferedReader: a daemon thread blocked inside
        # the buffered reader holds its lock, and interpreter shutdown then
        # aborts the process (SIGABRT) instead of exiting cleanly.
        self._in_fd = (stdin if stdin is not None else sys.stdin).fileno()
        self._out_fd = stdout_fd if stdout_fd is not None else sys.stdout.fileno()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="acp-stdout")
        # A daemon thread: a blocked read must never keep the process alive at exit.
        self._thread = threading.Thread(target=self._pump, name="acp-stdin", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                chunk = os.read(self._in_fd, 65536)
                if not chunk:
                    break
                self._loop.call_soon_threadsafe(self.reader.feed_data, chunk)
        except (OSError, ValueError):
            pass
        finally:
            try:
                self._loop.call_soon_threadsafe(self.reader.feed_eof)
            except RuntimeError:
                pass  # the loop is already closed

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._out_fd, view)
            view = view[written:]

    async def write_line(self, data: bytes) -> None:
        """Write one already-encoded line to stdout, in order; ConnectionError once closed.

        One worker thread takes the writes in submission order, so concurrent
        callers never interleave.
        """
        try:
            await self._loop.run_in_executor(self._writer, self._write_all, data)
        except RuntimeError as exc:  # the writer was shut down (close())
            raise ConnectionError("stdout writer closed") from exc

    def close(self) -> None:
        """Stop the writer thread (pending writes finish first)."""
        self._writer.shutdown(wait=True)
