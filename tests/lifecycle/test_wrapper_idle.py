"""The real wrapper while its adapter is idle: its loop sleeps (no wake-up every fraction
of a second per session), and still acts at once on what it supervises — the adapter's
exit, and its parent's death (the adapter's group is then terminated)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import psutil

from services.lifecycle.adapters.spawn import install_wrapper
from tests.lifecycle.conftest import gone, wait_until

#: Reads stdin until EOF, then exits: an adapter with nothing to do.
IDLE_ADAPTER = "import sys; sys.stdin.buffer.read()"
#: A quiet spell long enough for the old 0.25 s poll to have woken a dozen times.
QUIET_SECS = 3.0
#: Long enough for anything here on a loaded machine; a bound, not a measurement.
PATIENCE_SECS = 30.0


def _wakeups(pid: int) -> int:
    """How often the process went to sleep and woke (voluntary context switches)."""
    return psutil.Process(pid).num_ctx_switches().voluntary


async def _wrapper_argv(tmp_path: Path, parent_pid: str) -> list[str]:
    wrapper = (await install_wrapper(tmp_path / "state")).path  # as the service runs it
    return [sys.executable, "-I", "-S", str(wrapper), "--lease-id", "L", "--instance-id", "I",
            "--parent-pid", parent_pid, "--stderr-log", str(tmp_path / "w.log"), "--",
            sys.executable, "-c", IDLE_ADAPTER]


async def test_an_idle_wrapper_sleeps_and_wakes_when_its_adapter_exits(tmp_path: Path) -> None:
    argv = await _wrapper_argv(tmp_path, str(os.getpid()))
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE)
    try:
        wrapper = psutil.Process(proc.pid)
        await wait_until(lambda: len(wrapper.children()) == 1, PATIENCE_SECS, "adapter started")
        await asyncio.sleep(0.5)  # past its start
        before = _wakeups(proc.pid)
        await asyncio.sleep(QUIET_SECS)
        assert _wakeups(proc.pid) - before <= 3, "the wrapper woke while nothing happened"

        assert proc.stdin is not None
        proc.stdin.close()  # the adapter reads EOF and exits: SIGCHLD wakes the wrapper
        assert await asyncio.wait_for(proc.wait(), PATIENCE_SECS) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# argv: the wrapper's argv as JSON — runs it as a child with this process as its parent,
# prints its pid, then waits to be killed.
PARENT = r"""
import json, os, subprocess, sys, time
argv = json.loads(sys.argv[1])
argv[argv.index("--parent-pid") + 1] = str(os.getpid())
child = subprocess.Popen(argv, stdin=subprocess.PIPE)
print(child.pid, flush=True)
while True:
    time.sleep(60)
"""


async def test_an_idle_wrapper_still_cleans_up_when_its_parent_dies(tmp_path: Path) -> None:
    argv = await _wrapper_argv(tmp_path, "0")
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, json.dumps(argv), stdout=asyncio.subprocess.PIPE)
    wrapper: psutil.Process | None = None
    try:
        assert parent.stdout is not None
        wrapper = psutil.Process(int(await asyncio.wait_for(parent.stdout.readline(),
                                                            PATIENCE_SECS)))
        await wait_until(lambda: len(wrapper.children()) == 1, PATIENCE_SECS, "adapter started")
        adapter = wrapper.children()[0]
        await asyncio.sleep(QUIET_SECS)  # idle first: the wrapper is asleep when it happens
        parent.kill()
        await parent.wait()
        await wait_until(lambda: gone(adapter), PATIENCE_SECS, "adapter terminated")
        await wait_until(lambda: gone(wrapper), PATIENCE_SECS, "wrapper exited")
        assert "terminating the adapter group" in (tmp_path / "w.log").read_text()
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
        if wrapper is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in wrapper.children(recursive=True):
                    child.send_signal(signal.SIGKILL)
                wrapper.send_signal(signal.SIGKILL)
