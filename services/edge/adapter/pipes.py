"""An adapter's stdin and stdout held by the edge itself.

Once the lifecycle service handed the pipes over (:mod:`services.edge.backends.fds`),
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

A hot restart's edge stops reading every adapter's stdout for good
(:func:`hold_every_stdout`): what it read is still delivered (and logged), what it did
not read stays in the pipe for the successor that takes the adapter up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.common.line_split import LineSplitter, lines_of
from services.common.protocol import MAX_ADAPTER_LINE_BYTES
from services.edge.backends.fds import TakenPipes

__all__ = ["EXIT_DRAIN_SECS", "AdapterPipes", "PipesEnd", "hold_every_stdout"]

#: After the adapter's exit is known, how long stdout may stay silent before it is left.
EXIT_DRAIN_SECS = 1.0
#: What stdout is read ahead of the relay before the pipe is left unread (backpressure).
READ_AHEAD_BYTES = 128 * 1024

#: Takes one read's lines (the link's relay).
Deliver = Callable[[list[str]], Awaitable[None]]


@dataclass(frozen=True)
class PipesEnd:
    """Why reading stdout ended."""

    #: Over-long lines were dropped: the limit (0: not that, stdout ended or went silent).
    too_long: int = 0


class _Stdout(asyncio.Protocol):
    """The stdout pipe's chunks as they arrive, read ahead within a bound (then the
    transport pauses), and a wait for more that :meth:`wake` can end early."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self._size = 0
        self.eof = False
        self.transport: asyncio.ReadTransport | None = None
        self._paused = False
        #: Reading stopped for good (:meth:`hold`): :meth:`take` never resumes it.
        self.held = False
        self._waiter: asyncio.Future[None] | None = None
        #: The loop the pipe is read on (asked once: each ask is a ``getpid`` call).
        self._loop: asyncio.AbstractEventLoop | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The pipe's transport."""
        self.transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        """A chunk: kept; past the bound the pipe is left unread until taken."""
        self.chunks.append(data)
        self._size += len(data)
        if self._size >= READ_AHEAD_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self.wake()

    def eof_received(self) -> bool:
        """The end of stdout."""
        self.eof = True
        self.wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The pipe closed (at its end, or here)."""
        self.eof = True
        self.wake()

    def wake(self) -> None:
        """End a :meth:`wait` under way."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        """Until a chunk or the end is there (or :meth:`wake`)."""
        if self.chunks or self.eof:
            return
        self._waiter = (self._loop or asyncio.get_running_loop()).create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def take(self) -> bytes:
        """Everything read so far (the pipe is read on again)."""
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        self._size = 0
        if self._paused and not self.held and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def hold(self) -> None:
        """Read nothing more from the pipe (what was read stays to be taken)."""
        self.held = True
        if not self._paused and self.transport is not None:
            self._paused = True
            with contextlib.suppress(RuntimeError):  # already closing
                self.transport.pause_reading()


class AdapterPipes:
    """The adapter's pipes, read and written by the edge."""

    def __init__(self, taken: TakenPipes, deliver: Deliver) -> None:
        self._taken = taken
        self._deliver = deliver
        self._too_long = taken.too_long
        self._splitter = LineSplitter(MAX_ADAPTER_LINE_BYTES, self._dropped,
                                      partial=taken.partial, dropping=taken.dropping)
        self._stdout = _Stdout()
        self._stdin: asyncio.WriteTransport | None = None
        self._pending: list[str] = []
        self._flush_scheduled = False
        self._exit_known = asyncio.Event()
        self._closed = False
        self._delivering = False
        _OPEN.add(self)

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
            await loop.connect_read_pipe(lambda: self._stdout, stdout)
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
        self._stdout.wake()

    async def run(self) -> PipesEnd:
        """Deliver stdout, what was read before first, until it ends (see the module
        docstring); never raises for the pipe itself."""
        taken = self._taken
        if taken.lines:
            await self._deliver(lines_of(taken.lines.decode("utf-8", "replace")))
        stdout = self._stdout
        while not self._too_long:
            if not stdout.chunks and not stdout.eof:
                if self._exit_known.is_set():
                    try:
                        await asyncio.wait_for(stdout.wait(), EXIT_DRAIN_SECS)
                    except TimeoutError:
                        break  # silent since the exit: a descendant holds it open
                else:
                    await stdout.wait()
                continue
            if not stdout.chunks:  # the end, and everything before it delivered
                tail = self._splitter.end()
                if tail is not None:
                    await self._deliver([tail])
                break
            lines: list[str] = []
            for text in self._splitter.feed(stdout.take()):
                lines += lines_of(text)
            if lines:
                self._delivering = True
                try:
                    await self._deliver(lines)
                finally:
                    self._delivering = False
        return PipesEnd(too_long=MAX_ADAPTER_LINE_BYTES if self._too_long else 0)

    @property
    def settled(self) -> bool:
        """Everything read from stdout was delivered (held: nothing more will be)."""
        return not self._stdout.chunks and not self._delivering

    def close(self) -> None:
        """Let both pipes go (queued stdin lines are still written)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.close_stdin()
        if self._stdout.transport is not None:
            self._stdout.transport.close()


#: Every pipe pair this process opened and still references (for a hot restart's hold).
_OPEN: weakref.WeakSet[AdapterPipes] = weakref.WeakSet()


def hold_every_stdout() -> list[AdapterPipes]:
    """Stop reading every open adapter's stdout in this process, for good: the bytes not
    read stay in each pipe for whoever takes the adapter up next. Returns the pipes held
    (each :attr:`AdapterPipes.settled` once what it had read is delivered)."""
    held = [pipes for pipes in list(_OPEN) if not pipes._closed]
    for pipes in held:
        pipes._stdout.hold()
    return held
