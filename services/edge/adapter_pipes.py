"""An adapter's stdin and stdout held by the edge itself (issue 28).

Once the lifecycle service handed the pipes over (:mod:`services.edge.adapter_fds`),
:class:`AdapterPipes` is the link's data path: lines written go straight into the
adapter's stdin (whatever one loop iteration wrote, in one write), and stdout is
read and split here, each read's lines handed on as one batch — in order, one
batch at a time, so a relay that waits (a slow client) leaves the pipe unread and
the adapter blocks on its own writes, as it did behind the lifecycle service's
bounded buffer. What the lifecycle service had read already comes first.

A line over the limit is dropped up to its newline (without its neighbours) and
ends the reading: the adapter broke ACP's framing (:attr:`PipesEnd.too_long`).
After the adapter's exit is known (:meth:`AdapterPipes.exit_known`) stdout is
read to its end — or until it stays silent for ``EXIT_DRAIN_SECS``: a descendant
may hold it open — so every line comes before the exit, as over the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.common.line_split import LineSplitter, lines_of
from services.common.protocol import MAX_ADAPTER_LINE_BYTES
from services.edge.adapter_fds import TakenPipes

__all__ = ["EXIT_DRAIN_SECS", "AdapterPipes", "PipesEnd"]

#: After the adapter's exit is known, how long stdout may stay silent before it is left.
EXIT_DRAIN_SECS = 1.0
#: The most one read of stdout takes.
READ_CHUNK_BYTES = 64 * 1024
#: What the stdout reader buffers ahead of the relay (asyncio pauses the pipe at twice this).
READ_AHEAD_BYTES = 64 * 1024

#: Takes one read's lines (the link's relay).
Deliver = Callable[[list[str]], Awaitable[None]]


@dataclass(frozen=True)
class PipesEnd:
    """Why reading stdout ended."""

    #: Over-long lines were dropped: the limit (0: not that, stdout ended or went silent).
    too_long: int = 0


class AdapterPipes:
    """The adapter's pipes, read and written by the edge."""

    def __init__(self, taken: TakenPipes, deliver: Deliver) -> None:
        self._taken = taken
        self._deliver = deliver
        self._too_long = taken.too_long
        self._splitter = LineSplitter(MAX_ADAPTER_LINE_BYTES, self._dropped,
                                      partial=taken.partial, dropping=taken.dropping)
        self._stdout: asyncio.StreamReader | None = None
        self._stdout_transport: asyncio.BaseTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._pending: list[str] = []
        self._flush_scheduled = False
        self._exit_known = asyncio.Event()
        self._closed = False

    def _dropped(self) -> None:
        self._too_long += 1

    async def open(self) -> None:
        """Put both pipes on this loop (the descriptors belong to the transports from here;
        on failure they are closed)."""
        loop = asyncio.get_running_loop()
        taken = self._taken
        stdin = os.fdopen(taken.stdin, "wb", buffering=0)
        stdout = os.fdopen(taken.stdout, "rb", buffering=0)
        try:
            reader = asyncio.StreamReader(limit=READ_AHEAD_BYTES)
            self._stdout_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), stdout)
            self._stdout = reader
            transport, _ = await loop.connect_write_pipe(asyncio.Protocol, stdin)
            self._stdin = transport  # (uvloop's is no asyncio.WriteTransport subclass: no check)
        except BaseException:
            self.close()
            stdin.close()
            stdout.close()
            raise

    # ------------------------------------------------------------------ stdin

    def write(self, line: str) -> None:
        """Queue ``line`` for stdin; written with whatever else this loop iteration wrote."""
        if self._closed:
            return
        self._pending.append(line)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        lines, self._pending = self._pending, []
        stdin = self._stdin
        if stdin is None or stdin.is_closing() or not lines:
            return  # the adapter closed stdin (or is gone): as over the stream, dropped
        stdin.write("".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape"))

    def close_stdin(self) -> None:
        """EOF on stdin as far as this copy goes (after what is queued)."""
        self._flush()
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

    # ------------------------------------------------------------------ stdout

    def exit_known(self) -> None:
        """The adapter exited: read on to the end of stdout, or until it goes silent."""
        self._exit_known.set()

    async def run(self) -> PipesEnd:
        """Deliver stdout, what was read before first, until it ends (see the module
        docstring); never raises for the pipe itself."""
        taken = self._taken
        if taken.lines:
            await self._deliver(lines_of(taken.lines.decode("utf-8", "replace")))
        reader = self._stdout
        assert reader is not None
        while not self._too_long:
            try:
                if self._exit_known.is_set():
                    chunk = await asyncio.wait_for(reader.read(READ_CHUNK_BYTES),
                                                   EXIT_DRAIN_SECS)
                else:
                    chunk = await reader.read(READ_CHUNK_BYTES)
            except (TimeoutError, OSError):
                break
            if not chunk:
                tail = self._splitter.end()
                if tail is not None:
                    await self._deliver([tail])
                break
            lines: list[str] = []
            for text in self._splitter.feed(chunk):
                lines += lines_of(text)
            if lines:
                await self._deliver(lines)
        return PipesEnd(too_long=MAX_ADAPTER_LINE_BYTES if self._too_long else 0)

    def close(self) -> None:
        """Let both pipes go (queued stdin lines are still written)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.close_stdin()
        if self._stdout_transport is not None:
            self._stdout_transport.close()
