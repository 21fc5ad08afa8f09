"""Installing the wrapper under this gateway's wrapper root and spawning it.

The wrapper root is ``<lifecycle state dir>/wrapper``: each install (state
dir) has its own, so the live command of a wrapper names the gateway that
spawned it. :func:`install_wrapper` copies the wrapper
(:mod:`services.lifecycle.wrapper`) there, the supervisor as ``acpgate_wrapper.py`` and
its parts beside it under the names it imports them by (atomically, only when changed);
the service runs it as
``<python> -I -S <wrapper path> --lease-id … -- <command> <args…>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.common.private_files import PRIVATE_FILE_MODE, private_dir, tighten
from services.lifecycle.adapters.child_env import child_environment
from services.lifecycle.adapters.session_logs import remove_session_links
from services.lifecycle.attach.stdout_pipe import grow_pipe
from services.lifecycle.processes.verify import INSTANCE_ENV, LEASE_ENV, WRAPPER_INTERPRETER_FLAGS
from services.lifecycle.wrapper import bookkeeping as wrapper_log
from services.lifecycle.wrapper import control as wrapper_control
from services.lifecycle.wrapper import supervisor as wrapper_module

WRAPPER_DIR_NAME = "wrapper"
WRAPPER_FILE_NAME = "acpgate_wrapper.py"
#: The wrapper's standard-library parts and the names it imports them by, beside it.
WRAPPER_PARTS = ((wrapper_control, "wrapper_control.py"), (wrapper_log, "wrapper_log.py"))
LOG_DIR_NAME = "logs"


@dataclass(frozen=True)
class WrapperPaths:
    """Where this gateway's wrapper lives."""

    root: Path
    path: Path


@dataclass(frozen=True)
class SpawnSpec:
    """Everything one wrapper spawn needs."""

    lease_id: str
    instance_id: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    term_grace_ms: int = 3000
    #: What the adapter takes from this service's environment beyond the clean base.
    pass_env: tuple[str, ...] = ()
    stderr_log: Path = Path()
    stderr_max_bytes: int = wrapper_module.DEFAULT_STDERR_MAX_BYTES
    #: The adoption window (0: none) and the wrapper's control socket.
    adopt_secs: float = 0.0
    control_path: str = ""


@dataclass
class AdoptFds:
    """A wrapper with an adoption window: the ACP pipes made before its argv (which names
    the ends it keeps) and the pipe its adopt key comes on (written, then closed here)."""

    in_r: int
    in_w: int
    out_r: int
    out_w: int
    key_r: int

    @classmethod
    def open(cls, key: bytes) -> AdoptFds:
        """Both ACP pipes and the key's pipe, the key in it."""
        fds: list[int] = []
        try:
            for _ in range(3):
                fds.extend(os.pipe())
            grow_pipe(fds[2])
            os.write(fds[5], key.hex().encode())
            os.close(fds[5])
        except BaseException:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        return cls(fds[0], fds[1], fds[2], fds[3], fds[4])

    def close(self) -> None:
        """Close every descriptor still here."""
        for fd in (self.in_r, self.in_w, self.out_r, self.out_w, self.key_r):
            with contextlib.suppress(OSError):
                os.close(fd)


def _install_file(root: Path, source_path: Path, name: str) -> Path:
    """``source_path`` as ``root/name`` (atomically, only when it changed), owner-only."""
    target = root / name
    source = source_path.read_bytes()
    try:
        current = target.read_bytes()
    except FileNotFoundError:
        current = None
    if current != source:
        tmp = root / f".{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(source)
        os.replace(tmp, target)
    tighten(target, PRIVATE_FILE_MODE)
    return target


def _install_sync(state_dir: Path) -> WrapperPaths:
    root = private_dir(state_dir / WRAPPER_DIR_NAME)
    target = _install_file(root, Path(wrapper_module.__file__), WRAPPER_FILE_NAME)
    tighten(target, PRIVATE_FILE_MODE)
    for part, name in WRAPPER_PARTS:
        _install_file(root, Path(str(part.__file__)), name)
    logs = private_dir(state_dir / LOG_DIR_NAME)  # adapters' stderr: the owner's alone
    for log_file in logs.iterdir():  # and what an earlier version left readable
        if log_file.is_file() and not log_file.is_symlink():
            tighten(log_file, PRIVATE_FILE_MODE)
    return WrapperPaths(root=root.absolute(), path=target.absolute())


async def install_wrapper(state_dir: Path) -> WrapperPaths:
    """Put the wrapper under ``<state_dir>/wrapper`` (idempotent)."""
    return await asyncio.to_thread(_install_sync, state_dir)


def stderr_log_path(state_dir: Path, lease_id: str) -> Path:
    """The bounded per-lease stderr log of the adapter."""
    return state_dir / LOG_DIR_NAME / f"{lease_id}.log"


def remove_stderr_logs(state_dir: Path, lease_ids: list[str]) -> None:
    """Delete the stderr logs (and rotated parts) of expired leases, and the session links
    to them (:mod:`services.lifecycle.adapters.session_logs`; blocking)."""
    remove_session_links(state_dir, lease_ids)
    for lease_id in lease_ids:
        path = stderr_log_path(state_dir, lease_id)
        for p in (path, path.with_name(path.name + ".1")):
            p.unlink(missing_ok=True)


def wrapper_argv(paths: WrapperPaths, spec: SpawnSpec, *, parent_pid: int, report_fd: int,
                 adopt: AdoptFds | None = None) -> list[str]:
    """The exact argv of the wrapper (its sha256 is the lease's command hash); with
    ``adopt``, its adoption window, control socket, key pipe and the pipe ends it keeps."""
    window = [
        "--adopt-secs", f"{spec.adopt_secs:g}",
        "--control", spec.control_path,
        "--adopt-key-fd", str(adopt.key_r),
        "--hold-stdin-fd", str(adopt.in_w),
        "--hold-stdout-fd", str(adopt.out_r),
    ] if adopt is not None else []
    return [
        sys.executable,
        *WRAPPER_INTERPRETER_FLAGS,
        str(paths.path),
        "--lease-id",
        spec.lease_id,
        "--instance-id",
        spec.instance_id,
        "--parent-pid",
        str(parent_pid),
        "--term-grace-ms",
        str(spec.term_grace_ms),
        "--report-fd",
        str(report_fd),
        "--stderr-log",
        str(spec.stderr_log),
        "--stderr-max-bytes",
        str(spec.stderr_max_bytes),
        *window,
        "--",
        spec.command,
        *spec.args,
    ]


def wrapper_env(spec: SpawnSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The clean base and the spec's passed variables drawn from ``base`` (this service's
    environment, :mod:`services.lifecycle.adapters.child_env`), the spec's ``env`` over them, the
    lease markers last."""
    env = child_environment(base, spec.pass_env, spec.env)
    env[LEASE_ENV] = spec.lease_id
    env[INSTANCE_ENV] = spec.instance_id
    return env


@dataclass
class SpawnedWrapper:
    """A started wrapper process, the read end of its report pipe, and this service's ends
    of the adapter's ACP pipes (stdin's write end, stdout's read end)."""

    process: asyncio.subprocess.Process
    report: asyncio.StreamReader
    stdin: int
    stdout: int


async def spawn_wrapper(
    argv: Sequence[str], spec: SpawnSpec, report_r: int, report_w: int,
    adopt: AdoptFds | None = None,
) -> SpawnedWrapper:
    """Start the wrapper with ``argv``; the report pipe ends are consumed either way.

    The ACP pipes are this service's own (not asyncio's subprocess pipes): the channel
    reads stdout with no stream buffer between, and may hand the pipes to an attacher
    (:meth:`services.lifecycle.attach.channel.AdapterChannel.hand_over`)."""
    loop = asyncio.get_running_loop()
    in_r = in_w = out_r = out_w = -1
    kept: tuple[int, ...] = ()
    try:
        if adopt is not None:  # made before the argv; the wrapper keeps copies of ours
            in_r, in_w, out_r, out_w = adopt.in_r, adopt.in_w, adopt.out_r, adopt.out_w
            kept = (adopt.key_r, in_w, out_r)
        else:
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            grow_pipe(out_r)
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=in_r,
            stdout=out_w,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=spec.cwd or None,
            env=wrapper_env(spec, os.environ),
            pass_fds=(report_w, *kept),
        )
    except BaseException:
        for fd in (report_r, report_w, in_r, in_w, out_r, out_w, *kept[:1]):
            if fd >= 0:
                os.close(fd)
        raise
    for fd in (report_w, in_r, out_w, *kept[:1]):  # the wrapper's: the adapter holds them now
        os.close(fd)
    reader = asyncio.StreamReader(loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    await loop.connect_read_pipe(lambda: protocol, os.fdopen(report_r, "rb", buffering=0))
    return SpawnedWrapper(process=process, report=reader, stdin=in_w, stdout=out_r)
