"""Shared helpers for the real-process lifecycle tests.

Adapter stand-ins are small Python scripts written into the test's tmp dir.
Every process a test causes to exist is tracked by :class:`ProcessGuard`, which
at teardown kills only those very processes (psutil checks the birth identity
before signalling), so a failing test never leaves anything behind and never
signals a process it did not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.config import Config, load_config
from services.common.grpc_server import RunningServer
from services.lifecycle.api.server import start_lifecycle_server
from tests.launches import config_environ, install_test_key

REPO = Path(__file__).resolve().parents[2]
STREAM_EOF = grpc.aio.EOF  # type: ignore[attr-defined]

ECHO = r"""
import sys
code = int(sys.argv[1]) if len(sys.argv) > 1 else 0
for line in sys.stdin:
    sys.stdout.write(line)
    sys.stdout.flush()
sys.stderr.write("echo adapter: stdin closed, bye\n")
sys.stderr.flush()
sys.exit(code)
"""

# Prints its environment markers and cwd first, then echoes.
CHATTY = r"""
import json, os, sys
keys = ["ACPGATE_LEASE_ID", "ACPGATE_GATEWAY_INSTANCE_ID", "EXTRA_VAR"]
print(json.dumps({"env": {k: os.environ.get(k) for k in keys}, "cwd": os.getcwd(),
                  "pgid": os.getpgid(0), "pid": os.getpid()}), flush=True)
for line in sys.stdin:
    sys.stdout.write(line)
    sys.stdout.flush()
"""

# argv: pidfile ignore|obey — spawns a grandchild in its group, records both PIDs.
TREE = r"""
import json, os, signal, subprocess, sys, time
pidfile, mode = sys.argv[1], sys.argv[2]
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grand = subprocess.Popen([sys.executable, "-c",
    "import signal, sys, time\n"
    "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(1)\n", mode])
tmp = pidfile + ".tmp"
with open(tmp, "w") as fh:
    json.dump({"adapter": os.getpid(), "grandchild": grand.pid}, fh)
os.replace(tmp, pidfile)
for line in sys.stdin:
    sys.stdout.write(line)
    sys.stdout.flush()
while True:
    time.sleep(1)
"""

# argv: count donefile [exit] — floods stdout, marks completion, optionally exits.
FLOOD = r"""
import sys
count, done = int(sys.argv[1]), sys.argv[2]
payload = "x" * 1000
for i in range(count):
    sys.stdout.write(f"{i:08d} {payload}\n")
sys.stdout.flush()
open(done, "w").close()
if len(sys.argv) > 3 and sys.argv[3] == "exit":
    sys.exit(0)
for line in sys.stdin:
    pass
"""

# argv: markerfile — an unrelated process that records every catchable signal.
UNRELATED = r"""
import signal, sys, time
marker = sys.argv[1]
def note(signum, frame):
    with open(marker, "a") as fh:
        fh.write(f"{signum}\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, note)
open(marker + ".ready", "w").close()
while True:
    time.sleep(1)
"""


@dataclass(frozen=True)
class Scripts:
    """Paths of the adapter stand-ins."""

    echo: Path
    chatty: Path
    tree: Path
    flood: Path
    unrelated: Path


@pytest.fixture
def scripts(tmp_path: Path) -> Scripts:
    """Write the adapter stand-ins into ``tmp_path/adapters``."""
    d = tmp_path / "adapters"
    d.mkdir()
    out = {}
    for name, text in (("echo", ECHO), ("chatty", CHATTY), ("tree", TREE), ("flood", FLOOD),
                       ("unrelated", UNRELATED)):
        path = d / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        out[name] = path
    return Scripts(**out)


def make_config(config_dir: Path, *, term_grace_ms: int = 300, adopt_secs: int = 0) -> Config:
    """A config dir whose ``config.toml`` sets the lifecycle grace and adoption window (0:
    the seed's immediate cleanup, unless a test sets one), with
    the tests' service key installed (``tests.launches``: requests sealed with it are the
    session service's)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.toml").write_text(
        f"[lifecycle]\nterm_grace_ms = {term_grace_ms}\nadopt_secs = {adopt_secs}\n",
        encoding="utf-8")
    cfg = load_config(config_dir, environ=config_environ())
    install_test_key(cfg)
    return cfg


def gone(proc: psutil.Process) -> bool:
    """True once the exact process (birth identity) has exited (a zombie counts as exited)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_until(pred: Callable[[], bool], within: float, what: str = "condition") -> None:
    """Poll ``pred`` every 20 ms until true; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_until_async(pred: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    """Like :func:`wait_until` for an async predicate."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)


class ProcessGuard:
    """Processes a test caused to exist; killed at teardown if still there."""

    def __init__(self) -> None:
        self.procs: dict[int, psutil.Process] = {}

    def track(self, pid: int) -> psutil.Process:
        """Remember ``pid`` with its birth identity (now)."""
        proc = psutil.Process(pid)
        self.procs.setdefault(pid, proc)
        return self.procs[pid]

    def cleanup(self) -> list[int]:
        """Kill what is left (identity-checked by psutil); the PIDs that were left."""
        left = [p for p in self.procs.values() if not gone(p)]
        for proc in left:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                proc.kill()  # psutil refuses if the PID now belongs to another birth
        psutil.wait_procs(left, timeout=3)
        return [p.pid for p in left]


@pytest.fixture
def guard() -> Iterator[ProcessGuard]:
    """A :class:`ProcessGuard` whose teardown kills leftovers."""
    g = ProcessGuard()
    yield g
    g.cleanup()


async def read_pidfile(path: Path, within: float = 10.0) -> dict[str, int]:
    """Wait for an adapter's pidfile and return it."""
    await wait_until(path.exists, within, f"pidfile {path}")
    text = await asyncio.to_thread(path.read_text)
    return {k: int(v) for k, v in json.loads(text).items()}


async def start_service_process(config_dir: Path, log_path: Path, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """``acpgate lifecycle-service --config-dir DIR`` as a real child process."""
    full_env = dict(os.environ)
    full_env.pop("ACPGATE_CONFIG_DIR", None)
    full_env.update(env or {})
    log = await asyncio.to_thread(open, log_path, "ab")
    with log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "acpgate", "lifecycle-service", "--config-dir", str(config_dir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
            cwd=str(REPO),
            env=full_env,
        )


class Attacher:
    """One Attach stream driven by a queue of requests; opened on ``lease_id``, or with
    ``ensure`` (``AttachOpen.ensure``); ``fd_pass``: able to take the pipes."""

    def __init__(self, stub: lifecycle_pb2_grpc.LifecycleServiceAsyncStub, lease_id: str = "",
                 *, ensure: pb.EnsureSessionRequest | None = None, fd_pass: bool = False) -> None:
        self.queue: asyncio.Queue[pb.AttachRequest | None] = asyncio.Queue()
        self.queue.put_nowait(pb.AttachRequest(open=pb.AttachOpen(lease_id=lease_id,
                                                                  ensure=ensure, fd_pass=fd_pass)))
        self.call = stub.Attach(self._requests())

    async def _requests(self) -> AsyncIterator[pb.AttachRequest]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item

    def send(self, *lines: str) -> None:
        self.queue.put_nowait(pb.AttachRequest(stdin=pb.Lines(lines=list(lines))))

    def close_stdin(self) -> None:
        self.queue.put_nowait(pb.AttachRequest(close_stdin=True))

    async def read(self) -> pb.AttachResponse:
        msg = await asyncio.wait_for(self.call.read(), 10.0)
        assert msg is not STREAM_EOF, "stream ended"
        return msg  # type: ignore[return-value]

    async def read_lines(self, n: int) -> list[str]:
        """Read stdout messages until ``n`` lines arrived."""
        lines: list[str] = []
        while len(lines) < n:
            msg = await self.read()
            assert msg.WhichOneof("msg") == "stdout", msg
            assert len(msg.stdout.lines) >= 1
            lines.extend(msg.stdout.lines)
        return lines


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Any]]:
    """A lifecycle server on a unix socket under ``tmp_path`` (300 ms grace) and a stub to it."""
    cfg = make_config(tmp_path / "gw", term_grace_ms=300)
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/lifecycle.sock")
    channel = server.dial()
    try:
        yield server, lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    finally:
        await channel.close(None)
        await server.stop()
