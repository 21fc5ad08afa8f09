"""The adapter's stdout as the lifecycle service holds it: read into a bounded buffer, or
handed to the edge.

:class:`StdoutPipe` reads the pipe itself (an asyncio read-pipe transport, no stream
buffer of its own between the pipe and the line blocks) and splits it into line blocks
for an attacher (:meth:`next_batch`). When the buffer is full it pauses the transport,
so the adapter blocks on its own writes instead of this process growing without bound:
at most one line over the bound is ever buffered, the rest of the chunk read is held
back (one read at most) until there is room.

:meth:`hand_over` stops reading at once and gives back a duplicate of the pipe's read
end with everything read and not delivered yet — the whole lines, then the start of the
next one — so that whoever reads the pipe next (the edge) goes on exactly
where this reader stopped. From then on the pipe is not read here, until
:meth:`read_here` (an attacher over the ``Attach`` stream) takes it back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass
from typing import cast

from services.common.line_split import LineSplitter, lines_of
from services.common.logs import get_logger
from services.lifecycle.attach.stdout_batches import Block, take_batch

log = get_logger("lifecycle.attach")

#: Kernel buffer asked for the adapter's stdout pipe (Linux default 64 KiB): fewer, larger
#: reads and fewer adapter wake-ups per update. Bounded; best effort (the default stays
#: when the kernel refuses).
ADAPTER_PIPE_BYTES = 256 * 1024


def grow_pipe(fd: int) -> None:
    """Ask for a larger kernel buffer on the pipe ``fd`` is an end of (best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, ADAPTER_PIPE_BYTES)


@dataclass(frozen=True)
class HandedStdout:
    """The read end of the pipe (a duplicate: the receiver closes it) and what was read of
    it already: ``lines`` (whole lines, newline-terminated), then ``partial`` (the start of
    the next line; empty when ``dropping``: the rest of an over-long line is being
    dropped up to its newline), and the over-long lines dropped and not reported yet."""

    fd: int
    lines: bytes
    partial: bytes
    dropping: bool
    too_long: int


class StdoutPipe(asyncio.Protocol):
    """One adapter's stdout: line blocks read ahead for the attacher, within a bound."""

    def __init__(self, lease_id: str, fd: int, *, max_buffer: int, max_batch: int,
                 max_line: int) -> None:
        self.lease_id = lease_id
        self._fd = fd
        self._max_buffer = max_buffer
        self._max_batch = max_batch
        self._max_line = max_line
        self._transport: asyncio.ReadTransport | None = None
        #: The fd went to a transport (which closes it); until then it is closed here.
        self._started = False
        self._splitter = LineSplitter(max_line, self._line_too_long)
        #: Lines waiting for the attacher, as read: one block (lines, characters) per chunk.
        self._blocks: collections.deque[Block] = collections.deque()
        #: Lines read past the bound, waiting for room (the transport is paused meanwhile).
        self._held: collections.deque[str] = collections.deque()
        self._buffered = 0
        #: Lines read here so far (the exit drain watches it move).
        self.lines_read = 0
        #: Over-long lines dropped and not reported yet; told: an (empty) batch woke for them.
        self._too_long, self._too_long_told = 0, True
        self.data = asyncio.Event()
        #: End of the stream here: EOF, or reading stopped for good (:meth:`stop`).
        self.done = asyncio.Event()
        #: The pipe was handed over (:meth:`hand_over`) and is not read here.
        self.handed = False

    # ------------------------------------------------------------------ transport

    async def start(self) -> None:
        """Begin reading (the transport owns the fd from here)."""
        loop = asyncio.get_running_loop()
        if self.done.is_set():
            return  # closed before it began
        self._started = True
        pipe = os.fdopen(self._fd, "rb", buffering=0)
        try:
            await loop.connect_read_pipe(lambda: self, pipe)
        except BaseException:
            pipe.close()
            self._end()
            raise

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The read transport is ready."""
        self._transport = cast(asyncio.ReadTransport, transport)  # (uvloop's: no subclass)
        if self.done.is_set():  # closed while it was being set up
            self._transport.close()
            return
        self._flow()

    def data_received(self, data: bytes) -> None:
        """A chunk of stdout: its whole lines join the buffer (or wait for room)."""
        for text in self._splitter.feed(data):
            self._take(text)
        self._flow()

    def eof_received(self) -> bool:
        """The last line, even without its newline; then the end."""
        tail = self._splitter.end()
        if tail is not None:
            self._take(tail)
        self._end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The transport closed (EOF, or :meth:`close`)."""
        self._end()

    def _end(self) -> None:
        self.done.set()
        self.data.set()

    def _flow(self) -> None:
        """Pause the transport while the buffer is full or handed over; resume otherwise."""
        transport = self._transport
        if transport is None or transport.is_closing() or self.done.is_set():
            return
        if self.handed or self._held or self._buffered >= self._max_buffer:
            if transport.is_reading():
                transport.pause_reading()
        elif not transport.is_reading():
            transport.resume_reading()

    def stop(self) -> None:
        """Stop reading for good (the pipe is held open by a descendant after the exit)."""
        if self._transport is not None and self._transport.is_reading():
            self._transport.pause_reading()
        self._end()

    def close(self) -> None:
        """Close the pipe's read end here (the fd, or the transport holding it)."""
        if self._transport is not None:
            self._transport.close()
        elif not self._started:
            self._started = True
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._end()

    # ------------------------------------------------------------------ buffer

    @property
    def buffered_bytes(self) -> int:
        """Characters of stdout waiting for an attacher."""
        return self._buffered

    @property
    def has_room(self) -> bool:
        """True while the buffer takes more (reading goes on)."""
        return not self._held and self._buffered < self._max_buffer

    def _line_too_long(self) -> None:
        log.error("adapter_line_too_long", lease_id=self.lease_id, limit=self._max_line)
        self._too_long, self._too_long_told = self._too_long + 1, False
        self.data.set()  # the attacher must hear of it, even with no line to send

    def take_too_long(self) -> int:
        """How many over-long lines were dropped since the last call (0: none)."""
        count, self._too_long = self._too_long, 0
        return count

    def _take(self, text: str) -> None:
        """Buffer the lines of ``text`` while there is room; hold back the rest.

        Admitting line by line keeps the bound exact: at most one line over
        ``max_buffer`` is ever buffered, and the rest of the chunk waits, held back,
        while the transport is paused.
        """
        lines = lines_of(text)
        if not lines:
            return
        size = sum(map(len, lines))
        if not self._held and self._buffered + size < self._max_buffer:
            # The whole chunk fits under the bound: what the loop below would do, at once.
            self._blocks.append((lines, size))
            self.lines_read += len(lines)
            self._buffered += size
            self.data.set()
            return
        self._held.extend(lines)
        self._admit()

    def _admit(self) -> None:
        """Move held lines into the buffer while it has room."""
        held = self._held
        while held and self._buffered < self._max_buffer:
            line = held.popleft()
            self._blocks.append(([line], len(line)))
            self.lines_read += 1
            self._buffered += len(line)
            self.data.set()

    async def next_batch(self, finished: asyncio.Event) -> list[str] | None:
        """The lines ready now (waiting for one, or for a dropped line: then maybe none, see
        :meth:`take_too_long`); None once ``finished`` and drained. A batch is the longest
        run of lines within the batch bound (:func:`take_batch`)."""
        while True:
            blocks = self._blocks
            if blocks:
                batch, size = take_batch(blocks, self._max_batch)
                self._buffered -= size
                if self._held:
                    self._admit()
                self._flow()
                if not blocks and not finished.is_set():
                    self.data.clear()
                return batch
            if not self._too_long_told:
                self._too_long_told = True
                return []
            if finished.is_set():
                return None
            self.data.clear()
            await self.data.wait()

    # ------------------------------------------------------------------ hand-over

    def hand_over(self) -> HandedStdout:
        """Stop reading here and hand the pipe over with what was read of it (see the
        module docstring); OSError when the stream ended here (its fd is closed) or the fd
        cannot be duplicated."""
        if self.done.is_set():
            raise OSError(errno.EBADF, "the adapter's stdout ended")
        fd = os.dup(self._fd)
        self.handed = True
        self._flow()
        lines = [line for block, _ in self._blocks for line in block]
        lines += self._held
        data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")
        partial, dropping = self._splitter.state()
        handed = HandedStdout(fd, data, partial, dropping, self.take_too_long())
        self._blocks.clear()
        self._held.clear()
        self._buffered = 0
        self._too_long_told = True
        self._splitter = LineSplitter(self._max_line, self._line_too_long)
        self.data.clear()
        return handed

    def keep_off(self) -> None:
        """Leave the pipe unread here: an attacher holds it (a re-adopted wrapper's, whose
        attacher took the pipes before this service started)."""
        self.handed = True
        self._flow()

    def read_here(self) -> None:
        """Read the pipe here again, after a hand-over (an attacher over the stream).

        Whatever the last holder read of a line it did not finish is gone: the first
        line read here may then be the rest of one (the JSON-RPC peer skips it)."""
        if self.handed:
            self.handed = False
            self._flow()
