"""One client process of the capacity benchmark (:mod:`bench.capacity`).

``python -m bench.capacity_client MODE COUNT CWD [URL TOKEN]`` opens ``COUNT``
sessions — over one WebSocket connection each to the gateway at ``URL``
(``MODE`` = ``ws``), or on ``COUNT`` firehose adapters it spawns and reads
itself (``direct``) — then talks to the benchmark over its stdin/stdout, one
JSON object per line:

- it writes ``{"ready": true}`` once every session is open;
- it reads ``{"go": "<prompt text>"}``, prompts every session at once, and
  writes ``{"updates", "expected", "last_ns", "latencies_us", "errors"}`` once
  every stream is in (or ``wait`` seconds passed): the relay latency of every
  update (adapter write → read here, CLOCK_MONOTONIC is system-wide);
- it reads ``{"close": true}`` (or EOF), closes everything and exits.

The benchmark spreads the sessions over several such processes, so that one
client's event loop is never what limits the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from bench.relay import initialize, new_session
from bench.stage import FIREHOSE
from bench.transports import Endpoint, adapter_argv, stdio_peer, ws_peer

#: Sessions one client opens at once (cold spawns are CPU-bound: not all at once).
OPEN_BATCH = 10


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _command(stdin: asyncio.StreamReader) -> dict[str, Any]:
    line = await stdin.readline()
    if not line:
        return {"close": True}
    value = json.loads(line)
    return value if isinstance(value, dict) else {"close": True}


async def _open(mode: str, cwd: Path, url: str, token: str) -> tuple[Endpoint, str]:
    if mode == "ws":
        ep = await ws_peer(url, token)
    else:
        ep = await stdio_peer(adapter_argv(FIREHOSE), cwd=cwd)
    await initialize(ep.peer)
    return ep, await new_session(ep.peer, cwd)


async def _stream(endpoints: list[tuple[Endpoint, str]], text: str, expect: int,
                  wait: float) -> dict[str, Any]:
    for ep, sid in endpoints:
        ep.peer.sink(sid).reset(expect, keep_latency=True)
    errors = 0

    async def one(ep: Endpoint, sid: str) -> None:
        nonlocal errors
        try:
            await ep.peer.prompt(sid, text, wait)
            await asyncio.wait_for(ep.peer.sink(sid).done.wait(), wait)
        except Exception:
            errors += 1

    await asyncio.gather(*(one(ep, sid) for ep, sid in endpoints))
    sinks = [ep.peer.sink(sid) for ep, sid in endpoints]
    return {
        "updates": sum(s.chunks for s in sinks),
        "expected": expect * len(endpoints),
        "last_ns": max((s.last_ns for s in sinks), default=0),
        "latencies_us": [ns // 1000 for s in sinks for ns in s.latencies_ns],
        "errors": errors,
    }


async def main_async(mode: str, count: int, cwd: Path, url: str, token: str) -> int:
    """Open the sessions, stream when told, report; 0 when every session opened."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    endpoints: list[tuple[Endpoint, str]] = []
    try:
        for start in range(0, count, OPEN_BATCH):
            endpoints += await asyncio.gather(*(
                _open(mode, cwd, url, token) for _ in range(min(OPEN_BATCH, count - start))))
        _emit({"ready": True})
        while True:
            command = await _command(stdin)
            if "go" in command:
                _emit(await _stream(endpoints, str(command["go"]), int(command["expect"]),
                                    float(command.get("wait", 120.0))))
            else:
                return 0
    finally:
        await asyncio.gather(*(ep.close() for ep, _ in endpoints), return_exceptions=True)


def main(argv: list[str]) -> int:
    """Entry point (see the module docstring)."""
    mode, count, cwd = argv[0], int(argv[1]), Path(argv[2])
    url, token = (argv[3], argv[4]) if mode == "ws" else ("", "")
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(mode, count, cwd, url, token))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
