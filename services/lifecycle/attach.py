"""The service's side of one wrapper: its ACP pipes, its reports, and who is attached.

:class:`AdapterChannel` reads the adapter's stdout into a bounded buffer while
no one (or someone slow) is attached. When the buffer is full it stops reading
the pipe, so the adapter blocks on its own writes instead of this process
growing without bound. An attacher takes whatever lines are ready as one batch
(:meth:`AdapterChannel.next_batch` never waits to fill a batch). When the
adapter exits, the remaining lines are delivered, then :attr:`exit_info`.
One attacher at a time (:meth:`AdapterChannel.attach`). EOF on the wrapper's
report pipe tells that the wrapper itself is gone, and whether it died
(:meth:`AdapterChannel.wrapper_died`), even while an orphaned adapter still
holds the ACP pipes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.logs import get_logger
from services.lifecycle.lines import Block, LineSplitter, take_batch
from services.lifecycle.stderr_tail import read_stderr_tail

log = get_logger("lifecycle.attach")

#: Bytes of stdout buffered while no attacher drains it (then the pipe is left unread).
DEFAULT_MAX_BUFFER_BYTES = 4 * 1024 * 1024
#: Upper bound of one batch (one gRPC message); at least one line is always sent. A batch is
#: in flight in the attacher at once, per session: 128 KiB (~500 updates) keeps the batching
#: gain (ARCHITECTURE: 64 lines per message already carry ~318k lines/s) while 200 sessions
#: streaming into slow clients no longer hold up to 1 MiB each in the edge (bench/PROFILE.md
#: §11: edge peak 192 -> 160 MB with 200 sessions; relay CPU per update unchanged).
DEFAULT_MAX_BATCH_BYTES = 128 * 1024
#: Longest accepted stdout line (a 10 MiB blob in base64 plus framing fits).
MAX_LINE_BYTES = 32 * 1024 * 1024
#: The pipe reader's own buffer bound: small, so a full channel stops reading the pipe.
PIPE_READ_LIMIT = 64 * 1024
#: One read of the adapter's stdout (then split into lines).
READ_CHUNK_BYTES = 64 * 1024
#: Kernel buffer asked for the adapter's stdout pipe (Linux default 64 KiB): fewer, larger
#: reads and fewer adapter wake-ups per update. Bounded; best effort (the default stays
#: when the kernel refuses).
ADAPTER_PIPE_BYTES = 256 * 1024
#: After the adapter exits, how long to wait for stdout EOF (a grandchild may hold it).
EXIT_DRAIN_SECS = 1.0
#: How long the wrapper has to report the adapter's start.
START_TIMEOUT_SECS = 10.0


class AttachBusy(Exception):
    """Another attacher is connected."""


class SpawnFailed(Exception):
    """The wrapper could not start the adapter."""


@dataclass(frozen=True)
class StartReport:
    """What the wrapper reports once the adapter runs."""

    adapter_pid: int
    pgid: int


@dataclass(frozen=True)
class ExitInfo:
    """How the adapter ended."""

    exit_code: int
    signal: int
    stderr_tail: str


class AdapterChannel:
    """One running wrapper+adapter: stdout buffer, stdin, reports, exit, attacher slot."""

    def __init__(
        self,
        lease_id: str,
        process: asyncio.subprocess.Process,
        report: asyncio.StreamReader,
        stderr_log: Path,
        *,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        self.lease_id = lease_id
        self.process = process
        self.stderr_log = stderr_log
        self._report = report
        self._max_buffer = max_buffer_bytes
        self._max_batch = max_batch_bytes
        #: Lines waiting for the attacher, as read: one block (lines, characters) per chunk.
        self._blocks: collections.deque[Block] = collections.deque()
        self._buffered = 0
        self._lines_read = 0
        #: Over-long lines dropped and not reported yet; told: an (empty) batch woke for them.
        self._too_long, self._too_long_told = 0, True
        self._data = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._stdout_done = asyncio.Event()
        self.started: asyncio.Future[StartReport] = asyncio.get_running_loop().create_future()
        self._exit_status: tuple[int, int] | None = None
        self._exit_known = asyncio.Event()
        #: EOF on the report pipe: only the wrapper holds its write end, so the
        #: wrapper has exited (asyncio's wait() would also wait for the ACP pipes,
        #: which an orphaned adapter keeps open).
        self.wrapper_gone = asyncio.Event()
        #: True once the wrapper reported the adapter's exit (its own orderly end).
        self.exit_reported = False
        self.exit_info: ExitInfo | None = None
        self.finished = asyncio.Event()
        self._attached = False
        self._stdin_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(self._read_stdout(), name=f"stdout-{lease_id}"),
            asyncio.create_task(self._read_reports(), name=f"report-{lease_id}"),
            asyncio.create_task(self._watch_exit(), name=f"exit-{lease_id}"),
        ]

    # ------------------------------------------------------------------ state

    @property
    def pid(self) -> int:
        """The wrapper's PID."""
        return self.process.pid

    @property
    def running(self) -> bool:
        """True until the adapter's exit is known."""
        return not self._exit_known.is_set()

    @property
    def buffered_bytes(self) -> int:
        """Bytes of stdout waiting for an attacher."""
        return self._buffered

    # ------------------------------------------------------------------ readers

    def _line_too_long(self) -> None:
        log.error("adapter_line_too_long", lease_id=self.lease_id, limit=MAX_LINE_BYTES)
        self._too_long, self._too_long_told = self._too_long + 1, False
        self._data.set()  # the attacher must hear of it, even with no line to send

    def take_too_long(self) -> int:
        """How many over-long lines were dropped since the last call (0: none)."""
        count, self._too_long = self._too_long, 0
        return count

    async def _take(self, text: str) -> None:
        """Buffer the complete lines of ``text`` (newline-separated), waiting for room per line.

        Waiting *between* lines keeps the bound exact: at most one line over
        ``max_buffer_bytes`` is ever buffered, and the rest of the chunk (at most
        ``READ_CHUNK_BYTES``) waits here while the pipe stays unread.
        """
        lines = text.split("\n")
        if "\r" in text:
            lines = [line.rstrip("\r") if line.endswith("\r") else line for line in lines]
        if "" in lines:
            lines = [line for line in lines if line]
        if not lines:
            return
        size = sum(map(len, lines))
        if self._space.is_set() and self._buffered + size < self._max_buffer:
            # The whole chunk fits under the bound: what the loop below would do, at once.
            self._blocks.append((lines, size))
            self._lines_read += len(lines)
            self._buffered += size
            self._data.set()
            return
        for line in lines:
            if line.endswith("\r"):
                line = line.rstrip("\r")
            if not line:
                continue
            if not self._space.is_set():
                await self._space.wait()  # backpressure: leave the pipe unread when full
            self._blocks.append(([line], len(line)))
            self._lines_read += 1
            self._buffered += len(line)
            if self._buffered >= self._max_buffer:
                self._space.clear()
            self._data.set()

    def _grow_stdout_pipe(self) -> None:
        """Ask for a larger kernel buffer on the adapter's stdout pipe (best effort)."""
        # asyncio.subprocess.Process exposes no pipe fds; its transport does.
        transport = getattr(self.process, "_transport", None)
        try:
            pipe = transport.get_pipe_transport(1).get_extra_info("pipe")  # type: ignore[union-attr]
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, ADAPTER_PIPE_BYTES)
        except (AttributeError, OSError, ValueError):
            pass  # not a Linux pipe, or over the user's pipe quota: keep the default

    async def _read_stdout(self) -> None:
        """Read stdout in chunks and split lines (one read per chunk, not one per line).

        A line longer than :data:`MAX_LINE_BYTES` is dropped (logged); the pipe's
        StreamReader has a small limit, so a full channel stops reading the pipe.
        """
        stdout = self.process.stdout
        assert stdout is not None
        self._grow_stdout_pipe()
        splitter = LineSplitter(MAX_LINE_BYTES, self._line_too_long)
        try:
            while True:
                await self._space.wait()  # backpressure: leave the pipe unread when full
                chunk = await stdout.read(READ_CHUNK_BYTES)
                if not chunk:
                    tail = splitter.end()
                    if tail is not None:
                        await self._take(tail)
                    break
                for text in splitter.feed(chunk):
                    await self._take(text)
        finally:
            self._stdout_done.set()
            self._data.set()

    async def _read_reports(self) -> None:
        try:
            while True:
                raw = await self._report.readline()
                if not raw:
                    self.wrapper_gone.set()  # EOF, never a cancelled read: the wrapper is gone
                    break
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                kind = event.get("event")
                if kind == "started" and not self.started.done():
                    self.started.set_result(
                        StartReport(int(event["adapter_pid"]), int(event["pgid"]))
                    )
                elif kind == "spawn_failed" and not self.started.done():
                    self.started.set_exception(SpawnFailed(str(event.get("error", "spawn failed"))))
                elif kind == "exit" and self._exit_status is None:
                    self.exit_reported = True
                    self._exit_status = (int(event.get("code", -1)), int(event.get("signal", 0)))
                    self._exit_known.set()
        finally:
            if not self.started.done():
                self.started.set_exception(SpawnFailed("wrapper ended before starting the adapter"))

    async def wrapper_died(self) -> bool:
        """Wait for the wrapper to go; True if it died rather than ended in order.

        An orderly end always reports the adapter's exit before the report pipe
        closes; a wrapper that is gone without that report (SIGKILL, a crash)
        left the adapter's tree to the lifecycle service.
        """
        await self.wrapper_gone.wait()
        return not self.exit_reported

    async def _watch_exit(self) -> None:
        wait_proc = asyncio.create_task(self.process.wait())
        wait_exit = asyncio.create_task(self._exit_known.wait())
        try:
            await asyncio.wait({wait_proc, wait_exit}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wait_exit.cancel()
        if self._exit_status is None:
            rc = await wait_proc
            self._exit_status = (-1, -rc) if rc < 0 else (rc, 0)
            self._exit_known.set()
        else:
            # The wrapper outlives the report while it cleans up: reap it in the background.
            self._tasks.append(wait_proc)
        while not self._stdout_done.is_set():
            seen = self._lines_read
            try:
                await asyncio.wait_for(self._stdout_done.wait(), EXIT_DRAIN_SECS)
            except TimeoutError:
                # Output waiting for an attacher (buffer full) is kept; a pipe that
                # stays silent is held open by a descendant: stop reading it.
                if self._space.is_set() and self._lines_read == seen:
                    self._tasks[0].cancel()
                    break
        tail = await asyncio.to_thread(read_stderr_tail, self.stderr_log)
        code, sig = self._exit_status
        self.exit_info = ExitInfo(code, sig, tail)
        self.finished.set()
        self._data.set()
        log.info("adapter_exit", lease_id=self.lease_id, exit_code=code, signal=sig)

    # ------------------------------------------------------------------ attach

    @contextlib.contextmanager
    def attach(self) -> Iterator[AdapterChannel]:
        """Hold the single attacher slot for the ``with`` body; AttachBusy if taken."""
        if self._attached:
            raise AttachBusy(self.lease_id)
        self._attached = True
        try:
            yield self
        finally:
            self._attached = False

    @property
    def attached(self) -> bool:
        """True while an attacher holds the slot."""
        return self._attached

    async def next_batch(self) -> list[str] | None:
        """The lines ready now (waiting for one, or for a dropped line: then maybe none, see
        :meth:`take_too_long`); None once finished and drained. A batch is the longest run
        of lines within ``max_batch_bytes`` (:func:`take_batch`)."""
        while True:
            blocks = self._blocks
            if blocks:
                batch, size = take_batch(blocks, self._max_batch)
                self._buffered -= size
                if self._buffered < self._max_buffer:
                    self._space.set()
                if not blocks and not self.finished.is_set():
                    self._data.clear()
                return batch
            if not self._too_long_told:
                self._too_long_told = True
                return []
            if self.finished.is_set():
                return None
            self._data.clear()
            await self._data.wait()

    async def write_lines(self, lines: list[str]) -> bool:
        """Write lines to the adapter's stdin; False if it is closed or gone."""
        if not lines:
            return True
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            return False
        data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")
        async with self._stdin_lock:
            try:
                stdin.write(data)
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                return False
        return True

    async def close_stdin(self) -> None:
        """EOF on the adapter's stdin (the process is not signalled)."""
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            return
        async with self._stdin_lock:
            stdin.close()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                # Shielded: a cancelled wait (the attacher went away) would leave the
                # pipe's own future cancelled, which Python 3.11's subprocess protocol then
                # tries to resolve (InvalidStateError in the loop's exception handler).
                await asyncio.shield(stdin.wait_closed())

    async def aclose(self) -> None:
        """Stop the reader tasks (the processes are the reaper's business).

        An attacher still connected drains what is buffered and then gets an
        exit (code -1 when the real one never arrived).
        """
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.started.done() and not self.started.cancelled():
            # A spawn given up before it read the start report (the lease closed meanwhile)
            # never waits for it: its failure is taken here, not printed at exit by the GC.
            self.started.exception()
        if not self.finished.is_set():
            code, sig = self._exit_status or (-1, 0)
            self.exit_info = ExitInfo(code, sig, "")
            self.finished.set()
            self._data.set()
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
