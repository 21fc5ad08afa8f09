"""shell: one command in the session workspace, in its own process group.

The command runs under ``/bin/sh -c`` with the session workspace as cwd. It
gets its own process group so that a timeout or a cancel kills everything it
started, not just the shell. Path-looking arguments are checked against the
policy first; that only sees the literal text. The real boundary is Landlock
(:mod:`services.agent.sandbox`): when the kernel offers it, the shell and
everything it starts cannot open forbidden paths, and writes are limited to
what the policy allows. Without Landlock the text check is all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Callable
from typing import Any, ClassVar

from services.agent.enforce import PolicyViolation, check_read, may_run_shell
from services.agent.sandbox import landlock_abi, make_plan, sandboxed_argv
from services.agent.tools.base import (
    ArgumentsPreview,
    ToolContext,
    ToolError,
    ToolResult,
    optional_int,
    require_str,
)
from services.common.logs import get_logger

log = get_logger("agent.shell")

DEFAULT_TIMEOUT_SECS = 120
MAX_TIMEOUT_SECS = 1800
#: Bytes of combined stdout/stderr kept; the rest is counted and dropped.
OUTPUT_CAP = 64 * 1024
#: Between SIGTERM and SIGKILL of the group on cancel/timeout (cancel must finish within 1 s).
KILL_GRACE_SECS = 0.3
#: How long a cancel waits, after the SIGKILL, for the group's last members to be gone
#: (a zombie nobody reaps keeps it: then the cancel goes on after this).
GROUP_GONE_SECS = 0.5
#: How often it looks.
GROUP_POLL_SECS = 0.01


def _path_candidates(command: str, cwd: str) -> list[str]:
    """Arguments that name a path: absolute, ``~``, containing ``..``, or existing in cwd."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:
        tokens = command.split()
    out: list[str] = []
    for token in tokens:
        value = token.split("=", 1)[1] if token.startswith("-") and "=" in token else token
        if not value or value.startswith("-"):
            continue
        parts = value.replace("\\", "/").split("/")
        if (value.startswith(("/", "~")) or ".." in parts
                or os.path.lexists(os.path.join(cwd, value))):
            out.append(value)
    return out


def check_command(policy: Any, command: str, cwd: str) -> None:
    """Refuse the shell in readonly and commands naming paths the policy refuses."""
    if not may_run_shell(policy):
        raise PolicyViolation("autonomy is readonly: the shell is not allowed")
    for candidate in _path_candidates(command, cwd):
        check_read(policy, candidate)


def kill_group(pgid: int, sig: int) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def group_gone(pgid: int, wait_secs: float) -> None:
    """Wait (at most ``wait_secs``) until process group ``pgid`` has no member left: a
    SIGKILL is delivered when its target next runs, so a busy machine may still show the
    killed command's background children for a moment (an orphan is reaped by init)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_secs
    while loop.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        await asyncio.sleep(GROUP_POLL_SECS)


class ShellTool(ArgumentsPreview):
    """Runs a shell command; output capped, timeout enforced, killed on cancel."""

    name = "shell"
    kind = "execute"
    mutating = True
    interactive = False
    description = ("Run a shell command (sh -c) in the working directory. Returns exit code "
                   "and combined stdout/stderr. Optional `timeout_secs`.")
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout_secs": {"type": "integer", "minimum": 1},
        },
        "required": ["command"],
    }

    def __init__(self, landlock: Callable[[], int] = landlock_abi) -> None:
        #: Probes the kernel's Landlock ABI (0 = none); a test can pass ``lambda: 0``.
        self._landlock = landlock

    async def argv(self, command: str, ctx: ToolContext) -> list[str]:
        """``sh -c command``, started through the Landlock trampoline when the kernel has it."""
        argv = ["/bin/sh", "-c", command]
        abi = await asyncio.to_thread(self._landlock)
        if abi < 1:
            log.info("shell_unconfined", session_id=ctx.session_id, reason="no landlock")
            return argv
        policy = ctx.policy
        plan = await asyncio.to_thread(make_plan, policy.workspace_dir, policy.allowed_roots,
                                       policy.forbidden_paths, policy.workspace_only)
        return sandboxed_argv(plan, argv)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the command and report exit code and output."""
        command = require_str(args, "command")
        cwd = ctx.policy.workspace_dir
        await asyncio.to_thread(check_command, ctx.policy, command, cwd)
        if not await asyncio.to_thread(os.path.isdir, cwd):
            raise ToolError(f"working directory does not exist: {cwd}")
        timeout = optional_int(args, "timeout_secs", DEFAULT_TIMEOUT_SECS, 1, MAX_TIMEOUT_SECS)
        argv = await self.argv(command, ctx)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=ctx.shell_env or None,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # own session → own process group, pgid = pid
        )
        pgid = proc.pid
        log.info("shell_start", session_id=ctx.session_id, pid=proc.pid)
        buf = bytearray()
        dropped = 0

        async def pump() -> None:
            nonlocal dropped
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(65536):
                room = OUTPUT_CAP - len(buf)
                buf.extend(chunk[: max(room, 0)])
                dropped += max(len(chunk) - max(room, 0), 0)

        reader = asyncio.create_task(pump())
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                timed_out = True
                await self._terminate(proc, pgid)
        except asyncio.CancelledError:
            # Cancel: the group goes down before the cancellation propagates.
            await asyncio.shield(self._terminate(proc, pgid))
            reader.cancel()
            raise
        finally:
            # Background children of a finished command would keep the pipe open.
            kill_group(pgid, signal.SIGKILL)
        try:
            await asyncio.wait_for(reader, 1.0)
        except TimeoutError:
            reader.cancel()
        text = buf.decode("utf-8", "replace")
        if dropped:
            text += f"\n… ({dropped} more bytes of output dropped)"
        if timed_out:
            raise ToolError(f"command timed out after {timeout} s and was killed\n{text}".rstrip())
        code = proc.returncode
        header = f"exit code {code}"
        return ToolResult(output=f"{header}\n{text}".rstrip(), ok=(code == 0))

    @staticmethod
    async def _terminate(proc: asyncio.subprocess.Process, pgid: int) -> None:
        """SIGTERM the group, then SIGKILL it after a short grace; reap the shell."""
        kill_group(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), KILL_GRACE_SECS)
        except TimeoutError:
            pass
        kill_group(pgid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            await asyncio.wait_for(proc.wait(), 1.0)
        # The group is down before a cancel propagates: its background children too.
        await group_gone(pgid, GROUP_GONE_SECS)
