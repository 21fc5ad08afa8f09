"""The service's side of one wrapper: its ACP pipes, its reports, and who is attached.

:class:`AdapterChannel` reads the adapter's stdout into a bounded buffer while
no one (or someone slow) is attached (:class:`~services.lifecycle.attach.stdout_pipe.StdoutPipe`:
when the buffer is full it stops reading the pipe, so the adapter blocks on its own
writes instead of this process growing without bound). An attacher takes whatever
lines are ready as one batch (:meth:`AdapterChannel.next_batch` never waits to fill a
batch), or takes the pipes themselves (:meth:`AdapterChannel.hand_over`, the edge on
this host). When the adapter exits, the remaining lines are delivered, then
:attr:`exit_info`. One attacher at a time (:meth:`AdapterChannel.attach`). EOF on the
wrapper's report pipe tells that the wrapper itself is gone, and whether it died
(:meth:`AdapterChannel.wrapper_died`), even while an orphaned adapter still holds the
ACP pipes.

The service creates both ACP pipes itself (:mod:`services.lifecycle.adapters.spawn`) and holds
one end of each: stdin's write end and stdout's read end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from services.common.logs import get_logger
from services.common.protocol import MAX_ADAPTER_LINE_BYTES
from services.lifecycle.attach.stderr_tail import read_stderr_tail
from services.lifecycle.attach.stdout_pipe import HandedStdout, StdoutPipe

log = get_logger("lifecycle.attach")

#: Bytes of stdout buffered while no attacher drains it (then the pipe is left unread).
DEFAULT_MAX_BUFFER_BYTES = 4 * 1024 * 1024
#: Upper bound of one batch (one gRPC message); at least one line is always sent. A batch is
#: in flight in the attacher at once, per session: 128 KiB (~500 updates) keeps the batching
#: gain (ARCHITECTURE: 64 lines per message already carry ~318k lines/s) while 200 sessions
#: streaming into slow clients hold far less than 1 MiB each in the edge (bench/PROFILE.md:
#: edge peak 192 -> 160 MB with 200 sessions against 1 MiB; relay CPU per update the same).
DEFAULT_MAX_BATCH_BYTES = 128 * 1024
#: Longest accepted stdout line (a 10 MiB blob in base64 plus framing fits).
MAX_LINE_BYTES = MAX_ADAPTER_LINE_BYTES
#: The most one read of the adapter's stdout takes (asyncio's read-pipe transport).
READ_CHUNK_BYTES = 256 * 1024
#: After the adapter exits, how long to wait for stdout EOF (a grandchild may hold it).
EXIT_DRAIN_SECS = 1.0
#: How long the wrapper has to report the adapter's start.
START_TIMEOUT_SECS = 10.0


class WrapperProcess(Protocol):
    """The wrapper as a channel watches it: this service's child (asyncio's process), or
    one it re-adopted (:class:`services.lifecycle.startup.adopt.AdoptedProcess`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class StdinHolder(Protocol):
    """A wrapper that keeps a copy of stdin's write end (its control channel)."""

    async def close_stdin(self) -> bool: ...


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


@dataclass(frozen=True)
class Handover:
    """An attacher's copies of the adapter's pipes (it closes them): stdin's write end, and
    stdout as :class:`~services.lifecycle.attach.stdout_pipe.HandedStdout` (read end and what was
    read of it already)."""

    stdin: int
    stdout: HandedStdout

    def close(self) -> None:
        """Close both descriptors here (after they were sent, or when they cannot be)."""
        for fd in (self.stdin, self.stdout.fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class AdapterChannel:
    """One running wrapper+adapter: stdout buffer, stdin, reports, exit, attacher slot."""

    def __init__(
        self,
        lease_id: str,
        process: WrapperProcess,
        report: asyncio.StreamReader,
        stderr_log: Path,
        *,
        stdin_fd: int,
        stdout_fd: int,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        control: StdinHolder | None = None,
        stdout_handed: bool = False,
    ) -> None:
        """``stdin_fd``, ``stdout_fd``: this service's ends of the adapter's pipes (stdin's
        write end, stdout's read end), owned by the channel from here. ``control``: the
        wrapper keeps a copy of stdin too, let go through it on :meth:`close_stdin`.
        ``stdout_handed``: an attacher may hold the pipe already (a re-adopted wrapper):
        stdout is not read here until an attacher relays (:meth:`StdoutPipe.read_here`)."""
        self.lease_id = lease_id
        self.process = process
        self.stderr_log = stderr_log
        self._report = report
        #: The adapter's stdout: read here, or handed to an attacher.
        self.stdout = StdoutPipe(lease_id, stdout_fd, max_buffer=max_buffer_bytes,
                                 max_batch=max_batch_bytes, max_line=MAX_LINE_BYTES)
        self.stdout.handed = stdout_handed
        self._control = control
        self._stdin_fd = stdin_fd
        self._stdin: asyncio.StreamWriter | None = None
        self._stdin_open = True
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
        #: Counts the attachers (:meth:`attach`): an fd grant is for one of them only.
        self.generation = 0
        self._stdin_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(self.stdout.start(), name=f"stdout-{lease_id}"),
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
        return self.stdout.buffered_bytes

    # ------------------------------------------------------------------ readers

    def take_too_long(self) -> int:
        """How many over-long lines were dropped since the last call (0: none)."""
        return self.stdout.take_too_long()

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
        stdout = self.stdout
        # Drained here only while read here: a pipe handed over is drained by its holder.
        while not stdout.done.is_set() and not stdout.handed:
            seen = stdout.lines_read
            try:
                await asyncio.wait_for(stdout.done.wait(), EXIT_DRAIN_SECS)
            except TimeoutError:
                # Output waiting for an attacher (buffer full) is kept; a pipe that
                # stays silent is held open by a descendant: stop reading it.
                if stdout.has_room and stdout.lines_read == seen:
                    stdout.stop()
                    break
        tail = await asyncio.to_thread(read_stderr_tail, self.stderr_log)
        code, sig = self._exit_status
        self.exit_info = ExitInfo(code, sig, tail)
        self.finished.set()
        stdout.data.set()
        log.info("adapter_exit", lease_id=self.lease_id, exit_code=code, signal=sig)

    # ------------------------------------------------------------------ attach

    @contextlib.contextmanager
    def attach(self) -> Iterator[AdapterChannel]:
        """Hold the single attacher slot for the ``with`` body; AttachBusy if taken."""
        if self._attached:
            raise AttachBusy(self.lease_id)
        self._attached = True
        self.generation += 1
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
        :meth:`take_too_long`); None once finished and drained (see
        :meth:`StdoutPipe.next_batch <services.lifecycle.attach.stdout_pipe.StdoutPipe.next_batch>`)."""
        return await self.stdout.next_batch(self.finished)

    def hand_over(self) -> Handover | None:
        """Copies of the pipes for the attacher (stdout no longer read here, see
        :meth:`StdoutPipe.hand_over <services.lifecycle.attach.stdout_pipe.StdoutPipe.hand_over>`);
        None when they cannot go now: nobody is attached, the adapter's exit is known (its
        remaining output and exit go over the stream), stdin is closed or a write to it is
        under way, or stdout ended. (Handed over to an earlier attacher, the pipe is not
        read here since: this one goes on from where that one left off.)"""
        stdin = self._stdin
        if (not self._attached or not self.running or not self._stdin_open
                or self._stdin_lock.locked() or self.stdout.done.is_set()
                or (stdin is not None and (stdin.is_closing()
                                           or stdin.transport.get_write_buffer_size()))):
            return None
        try:
            stdin_copy = os.dup(self._stdin_fd)
        except OSError:
            return None
        try:
            stdout = self.stdout.hand_over()
        except OSError:
            os.close(stdin_copy)
            return None
        return Handover(stdin_copy, stdout)

    async def _stdin_writer(self) -> asyncio.StreamWriter | None:
        """The writer of stdin's pipe (made on first use); None once stdin is closed."""
        if not self._stdin_open:
            return None
        if self._stdin is None:
            loop = asyncio.get_running_loop()
            pipe = os.fdopen(self._stdin_fd, "wb", buffering=0)  # the transport owns the fd
            transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, pipe)
            self._stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        return self._stdin

    async def write_lines(self, lines: list[str]) -> bool:
        """Write lines to the adapter's stdin; False if it is closed or gone."""
        if not lines:
            return True
        data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")
        async with self._stdin_lock:
            try:
                stdin = await self._stdin_writer()
                if stdin is None or stdin.is_closing():
                    return False
                stdin.write(data)
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                return False
        return True

    async def close_stdin(self) -> None:
        """EOF on the adapter's stdin, as far as this service holds it (the process is not
        signalled; an attacher holding a copy closes its own)."""
        async with self._stdin_lock:
            held = self._stdin_open
            self._close_stdin()
            if held and self._control is not None:
                await self._control.close_stdin()

    def _close_stdin(self) -> None:
        if not self._stdin_open:
            return
        self._stdin_open = False
        if self._stdin is not None:
            if not self._stdin.is_closing():
                self._stdin.close()  # flushes what is queued, then closes the fd
        else:
            with contextlib.suppress(OSError):
                os.close(self._stdin_fd)

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
            self.stdout.data.set()
        self.stdout.close()
        if self._stdin_open:
            self._stdin_open = False
            if self._stdin is not None:
                if not self._stdin.transport.is_closing():
                    self._stdin.transport.abort()
            else:
                with contextlib.suppress(OSError):
                    os.close(self._stdin_fd)
