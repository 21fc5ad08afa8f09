"""The stdio transport for the MCP servers a session starts.

The SDK's own ``stdio_client`` starts every server in a new session
(``setsid``), which would take it out of the lease's process group: a server
that outlives a killed agent would then escape the lifecycle's reaping. This
transport keeps the server in the agent's process group (it is the agent's
child, like every shell command), so the wrapper and the lifecycle service reap
it with the rest of the lease's tree (SPEC §13). It also

- gives the server the session workspace as its working directory and the
  environment it is handed (the agent's minus provider API keys, plus the
  server's own ``env``; for a gateway client's server without loader variables);
- sends each stderr line to the agent's structured log (the lease's log),
  never to stdout, which is the ACP channel;
- frames newline-delimited JSON-RPC messages up to :data:`MAX_MESSAGE_BYTES`
  (a 10 MiB blob is about 14 MB of base64);
- on exit closes the server's stdin, waits :data:`EXIT_GRACE_SECS`, then
  SIGTERMs and finally SIGKILLs the server and the descendants it had.

It yields the SDK's transport streams, so :class:`mcp.Client` runs on it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import mcp_types
import psutil
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from services.common.mcp_servers import McpStdioServer

__all__ = ["EXIT_GRACE_SECS", "MAX_MESSAGE_BYTES", "StdioExit", "StdioStartError", "Streams",
           "open_stdio"]

#: What a transport yields to :class:`mcp.Client`: messages in, messages out.
Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                MemoryObjectSendStream[SessionMessage]]

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
#: Characters of one stderr line kept in the log.
MAX_STDERR_LINE = 4000
#: How long a server may take to exit after its stdin closed, and again after SIGTERM.
EXIT_GRACE_SECS = 2.0
#: How long the exit status is awaited after the server's stdout ended.
EXIT_STATUS_WAIT_SECS = 0.5
_POLL_SECS = 0.02
_READ_CHUNK = 256 * 1024


class StdioStartError(Exception):
    """The server's process could not be started; ``str(exc)`` says why."""


@dataclass
class StdioExit:
    """What the connection learns about its process: pid, exit status, why it ended."""

    pid: int = 0
    returncode: int | None = None
    #: Set when the server's stdout ended (exited, crashed or closed it).
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    #: A protocol failure of ours that ended the connection ("" = none).
    problem: str = ""

    def describe(self) -> str:
        """``exit code 3`` / ``killed by signal 9`` / ``still running`` for messages."""
        if self.problem:
            return self.problem
        if self.returncode is None:
            return "closed its output"
        if self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"


async def _spawn(spec: McpStdioServer, cwd: str, env: Mapping[str, str],
                 argv: Sequence[str] | None) -> asyncio.subprocess.Process:
    command = list(argv) if argv is not None else [spec.command, *spec.args]
    try:
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, env=dict(env),
        )
    except OSError as exc:
        raise StdioStartError(f"cannot start `{spec.command}`: {exc.strerror or exc}") from None
    except ValueError as exc:  # e.g. an embedded NUL
        raise StdioStartError(f"cannot start `{spec.command}`: {exc}") from None


async def _read_stdout(proc: asyncio.subprocess.Process, exit_info: StdioExit,
                       sink: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    """Lines → parsed messages (parse errors are passed on as values, as the SDK does).

    At the end (EOF, or a message too large to frame) the stream closes, which
    fails the requests still waiting; the exit status is collected first so the
    connection can say how the server ended.
    """
    assert proc.stdout is not None
    buffer = bytearray()
    try:
        async with sink:
            while chunk := await proc.stdout.read(_READ_CHUNK):
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        await sink.send(_parse(line))
                if len(buffer) > MAX_MESSAGE_BYTES:
                    exit_info.problem = f"sent a message over {MAX_MESSAGE_BYTES} bytes"
                    return
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
        pass
    finally:
        try:
            if not exit_info.problem:
                await _exited(proc, EXIT_STATUS_WAIT_SECS)
        finally:
            exit_info.returncode = proc.returncode
            exit_info.closed.set()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line,
                                                                             by_name=False))
    except ValueError as exc:
        return exc


async def _write_stdin(proc: asyncio.subprocess.Process,
                       source: MemoryObjectReceiveStream[SessionMessage],
                       inbound: MemoryObjectReceiveStream[SessionMessage | Exception]) -> None:
    assert proc.stdin is not None
    try:
        async with source:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                proc.stdin.write(data.encode() + b"\n")
                await proc.stdin.drain()
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError):
        # The server stopped reading: end the session's view of the connection too
        # (the dispatcher takes a closed inbound stream as EOF).
        inbound.close()


async def _read_stderr(proc: asyncio.subprocess.Process, on_line: Callable[[str], None]) -> None:
    assert proc.stderr is not None
    while True:
        try:
            raw = await proc.stderr.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            raw = exc.partial
        except asyncio.LimitOverrunError as exc:
            raw = await proc.stderr.read(exc.consumed)
        if not raw:
            return
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if text.strip():
            on_line(text[:MAX_STDERR_LINE])


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


async def _exited(proc: asyncio.subprocess.Process, within: float) -> bool:
    """Poll the exit status (``wait()`` would also wait for pipes a grandchild may hold)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while proc.returncode is None:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL_SECS)
    return True


def _end_family(family: list[psutil.Process]) -> None:
    """SIGTERM the descendants still alive, SIGKILL those left after the grace (blocking).

    psutil checks each process's birth time before signalling: a reused PID is never hit.
    """
    alive = [p for p in family if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, survivors = psutil.wait_procs(alive, timeout=EXIT_GRACE_SECS)
    for p in survivors:
        with contextlib.suppress(psutil.Error):
            p.kill()


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """stdin EOF → grace → SIGTERM (server and descendants) → grace → SIGKILL."""
    family = await asyncio.to_thread(_descendants, proc.pid)
    if proc.stdin is not None:
        with contextlib.suppress(OSError, RuntimeError):
            proc.stdin.close()
    if not await _exited(proc, EXIT_GRACE_SECS):
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        if not await _exited(proc, EXIT_GRACE_SECS):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await _exited(proc, EXIT_GRACE_SECS)
    if family:
        await asyncio.to_thread(_end_family, family)


@asynccontextmanager
async def open_stdio(spec: McpStdioServer, *, cwd: str, env: Mapping[str, str],
                     on_stderr: Callable[[str], None], exit_info: StdioExit,
                     argv: Sequence[str] | None = None) -> AsyncIterator[Streams]:
    """Start the server and yield the SDK's (read, write) streams; stop it on exit.

    ``argv`` replaces the spec's command line (a confined start goes through the
    Landlock trampoline). Raises :class:`StdioStartError` when the process cannot
    be started.
    """
    proc = await _spawn(spec, cwd, env, argv)
    exit_info.pid = proc.pid
    read_sink, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_source = anyio.create_memory_object_stream[SessionMessage](0)
    tasks = [
        asyncio.create_task(_read_stdout(proc, exit_info, read_sink)),
        asyncio.create_task(_write_stdin(proc, write_source, read_stream)),
        asyncio.create_task(_read_stderr(proc, on_stderr)),
    ]
    try:
        yield read_stream, write_stream
    finally:
        # Shielded: a cancelled caller must still not leave a live server behind.
        stopping = asyncio.ensure_future(_stop(proc))
        try:
            await asyncio.shield(stopping)
        finally:
            exit_info.returncode = proc.returncode
            exit_info.closed.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for stream in (read_stream, write_stream, read_sink, write_source):
                await stream.aclose()
