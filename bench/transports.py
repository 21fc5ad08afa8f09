"""Line transports for :class:`bench.peer.Peer`: a child's stdio, or a WebSocket.

``stdio_peer`` runs any command (the firehose adapter itself, or ``acpgate
acp``) as an asyncio subprocess; ``ws_peer`` dials the gateway's ``/acp`` with a
bearer token. Both return an :class:`Endpoint` that closes cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.peer import Peer
from services.common.protocol import WS_SUBPROTOCOL

#: Large enough for any line the benchmarks produce (a 10k-item replay is many lines, not one).
LINE_LIMIT = 64 * 1024 * 1024


@dataclass
class Endpoint:
    """A connected peer and what must be closed with it."""

    peer: Peer
    proc: asyncio.subprocess.Process | None = None
    ws: ClientConnection | None = None
    #: Stderr of a child, drained so it can never block on a full pipe.
    stderr_tail: list[bytes] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None
    #: Stop the child with SIGTERM instead of stdin EOF (a server, not a stdio peer).
    terminate: bool = False

    async def close(self, wait: float = 30.0) -> int | None:
        """EOF / close frame, then wait for the child (killed if it does not exit)."""
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        code: int | None = None
        if self.proc is not None:
            if self.terminate and self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.terminate()
            if self.proc.stdin is not None:
                with contextlib.suppress(Exception):
                    self.proc.stdin.close()
            try:
                code = await asyncio.wait_for(self.proc.wait(), wait)
            except TimeoutError:
                self.proc.kill()
                code = await self.proc.wait()
        await self.peer.aclose()
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
        return code


async def _proc_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        line = await reader.readline()
        if not line:
            return
        yield line


async def _drain_stderr(reader: asyncio.StreamReader, tail: list[bytes]) -> None:
    while True:
        line = await reader.readline()
        if not line:
            return
        tail.append(line)
        del tail[:-50]


async def stdio_peer(argv: Sequence[str], *, env: dict[str, str] | None = None,
                     cwd: Path | None = None) -> Endpoint:
    """Start ``argv`` and speak JSON lines on its stdin/stdout."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=str(cwd) if cwd else None, limit=LINE_LIMIT)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    async def send(line: str) -> None:
        stdin.write(line.encode() + b"\n")
        await stdin.drain()

    tail: list[bytes] = []
    endpoint = Endpoint(Peer(send, _proc_lines(proc.stdout)), proc=proc, stderr_tail=tail)
    endpoint._drain = asyncio.create_task(_drain_stderr(proc.stderr, tail))
    return endpoint


def adapter_argv(script: Path) -> list[str]:
    """How the firehose adapter is started (the same in the config and the baseline)."""
    return [sys.executable, str(script)]


async def _ws_lines(ws: ClientConnection) -> AsyncIterator[str | bytes]:
    try:
        async for frame in ws:
            yield frame
    except ConnectionClosed:
        return


async def ws_peer(url: str, token: str) -> Endpoint:
    """Dial the gateway's ``/acp`` with ``Authorization: Bearer``."""
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                       subprotocols=[Subprotocol(WS_SUBPROTOCOL)], max_size=None,
                       ping_interval=None)

    async def send(line: str) -> None:
        await ws.send(line)

    return Endpoint(Peer(send, _ws_lines(ws)), ws=ws)
