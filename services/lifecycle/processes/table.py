"""The process table the lifecycle service reads and signals through.

Everything that looks at or signals a live process goes through
:class:`ProcessTable`, so verification and reaping can run against the real
host (:class:`PsutilProcessTable`) or an in-memory simulation
(:class:`FakeProcessTable`) in the table-driven lifecycle tests.

A process is identified by ``(pid, start_time)``: the start time is the
kernel's birth identity (clock ticks since boot on Linux), so a reused PID never
matches an old record. Signals are sent only to that identity: the real table
opens a pidfd, re-reads the start time through it and signals the pidfd, so a
PID recycled between the check and the signal cannot be hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal as signal_mod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import psutil

from services.common.logs import get_logger
from services.lifecycle.processes.proc_files import environ_bytes, pick_keys, runs_as_service

log = get_logger("lifecycle.proctable")

class ProcessTableError(Exception):
    """The table could not be read (listing failed, permission denied): fail closed."""


@dataclass(frozen=True)
class ProcInfo:
    """One live process as the table reports it."""

    pid: int
    ppid: int
    pgid: int
    #: Birth identity: start time in clock ticks since boot (Linux), never reused with the PID.
    start_time: int
    cmdline: tuple[str, ...] = ()
    exe: str = ""
    #: A zombie has exited and only waits to be reaped: it counts as gone.
    zombie: bool = False
    #: The process exists but could not be read (only ``pid`` is known): it is
    #: neither gone nor anyone's provable member, so a lease rooted here cannot
    #: be verified now (fail closed), and it never joins a tree.
    unreadable: bool = False

    @classmethod
    def unreadable_pid(cls, pid: int) -> ProcInfo:
        """The listing entry of a process that exists but cannot be read."""
        return cls(pid=pid, ppid=0, pgid=0, start_time=0, unreadable=True)

    @property
    def identity(self) -> tuple[int, int]:
        """``(pid, start_time)``: what a signal is addressed to."""
        return (self.pid, self.start_time)


class ProcessTable(Protocol):
    """Read-only views of the host's processes plus identity-checked signalling."""

    async def get(self, pid: int) -> ProcInfo | None:
        """The process with ``pid``, or None when there is none (zombies included).

        Raises :class:`ProcessTableError` when the answer is unknowable.
        """
        ...

    async def list_all(self) -> list[ProcInfo]:
        """Every process on the host. Raises :class:`ProcessTableError` when unavailable.

        A process that exists but cannot be read is listed as
        :meth:`ProcInfo.unreadable_pid`, never left out: absent means gone.
        """
        ...

    async def environ(self, pid: int, start_time: int) -> Mapping[str, str] | None:
        """The environment of that process, or None when it cannot be read."""
        ...

    async def environ_keys(
        self, procs: Sequence[ProcInfo], keys: Sequence[str]
    ) -> dict[tuple[int, int], dict[str, str]]:
        """The values of ``keys`` in the environment of each of ``procs``, in one pass.

        Keyed by identity; only processes that carry at least one of ``keys``
        appear. A process whose environment cannot be read (another user's, one
        exiting) or whose PID holds another birth by now is left out: it proves
        nothing. So is a process not running entirely as this service's user
        (real, effective, saved uid): a lease's processes run as the service's
        user, and another user's process carrying the keys (a set-uid program
        started with them, say) is never evidence. Costs one read per process,
        so callers ask only when needed.
        """
        ...

    async def runs_argv0(self, info: ProcInfo) -> bool | None:
        """Whether that process's live executable is the program its ``argv[0]`` names.

        False for an ``exec -a`` alias or a copied binary (and for a relative
        ``argv[0]``, which the lifecycle service never uses); None when it cannot
        be told (gone, another birth, unreadable).
        """
        ...

    async def runs_as_service(self, info: ProcInfo) -> bool:
        """Whether it runs entirely as this service's user (:mod:`.proc_files`); False
        when not, or when that cannot be told (gone, another birth, unreadable)."""
        ...

    async def signal(self, pid: int, start_time: int, sig: int) -> bool:
        """Send ``sig`` to exactly the process ``(pid, start_time)`` if :meth:`runs_as_service`.

        False when nothing was delivered: the process is gone, is another birth or user's,
        or the signal failed (permission denied, unreadable identity). Never
        raises for a failed signal: the caller's liveness check then sees the
        process as a survivor.
        """
        ...


# ---------------------------------------------------------------------- real table


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read_stat(pid: int) -> tuple[int, int, int, str] | None:
    """``(ppid, pgid, start_ticks, state)`` from ``/proc/<pid>/stat``, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    state = rest[0].decode()
    return int(rest[1]), int(rest[2]), int(rest[19]), state


def _has_proc() -> bool:
    return os.path.isdir("/proc/self")


def _info_sync(pid: int) -> ProcInfo | None:
    """One process, read directly; raises ProcessTableError when unreadable."""
    if _has_proc():
        try:
            stat = _read_stat(pid)
        except PermissionError as exc:
            raise ProcessTableError(f"cannot read /proc/{pid}/stat: {exc}") from None
        except (OSError, ValueError, IndexError) as exc:
            raise ProcessTableError(f"cannot parse /proc/{pid}/stat: {exc}") from None
        if stat is None:
            return None
        ppid, pgid, start, state = stat
        zombie = state in ("Z", "X")
        cmdline: tuple[str, ...] = ()
        exe = ""
        if not zombie:
            try:
                proc = psutil.Process(pid)
                with contextlib.suppress(psutil.AccessDenied):
                    # Unreadable stays empty: verification treats it as "cannot tell".
                    cmdline = tuple(proc.cmdline())
                with contextlib.suppress(psutil.AccessDenied):
                    exe = proc.exe()
            except psutil.ZombieProcess:
                zombie = True
            except psutil.NoSuchProcess:
                return None
        return ProcInfo(pid, ppid, pgid, start, cmdline, exe, zombie)
    # Non-Linux fallback: psutil only; birth identity from create_time in ticks.
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status = proc.status()
            return ProcInfo(
                pid=pid,
                ppid=proc.ppid(),
                pgid=os.getpgid(pid),
                start_time=round(proc.create_time() * _CLOCK_TICKS),
                cmdline=tuple(proc.cmdline()),
                exe=proc.exe(),
                zombie=status == psutil.STATUS_ZOMBIE,
            )
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None
    except psutil.AccessDenied as exc:
        raise ProcessTableError(f"permission denied reading process {pid}: {exc}") from None


def _list_sync() -> list[ProcInfo]:
    try:
        pids = psutil.pids()
    except (OSError, psutil.Error) as exc:
        raise ProcessTableError(f"process listing unavailable: {exc}") from None
    out: list[ProcInfo] = []
    for pid in pids:
        try:
            info = _info_sync(pid)
        except ProcessTableError:
            # It exists but cannot be read: say so. Dropping it would let a lease
            # rooted here be judged "root gone" (lost) when it is only unverifiable.
            out.append(ProcInfo.unreadable_pid(pid))
            continue
        if info is not None:
            out.append(info)
    return out


def _environ_sync(pid: int, start_time: int) -> dict[str, str] | None:
    try:
        info = _info_sync(pid)
        if info is None or info.start_time != start_time or info.zombie:
            return None
        env = psutil.Process(pid).environ()
    except (ProcessTableError, psutil.Error, OSError):
        return None
    # Re-check: the environment must belong to the same birth.
    if _same_birth(pid, start_time) is None:
        return None
    return dict(env)


def _same_birth(pid: int, start_time: int) -> ProcInfo | None:
    """``pid`` read again (after reading its environment or executable) if it is still
    the birth ``start_time``: else what was read may have been another birth's; None."""
    try:
        again = _info_sync(pid)
    except ProcessTableError:
        return None
    return again if again is not None and again.start_time == start_time else None


def _runs_argv0_sync(info: ProcInfo) -> bool | None:
    argv0 = info.cmdline[0] if info.cmdline else ""
    if not argv0 or not os.path.isabs(argv0):
        return False
    try:
        if _has_proc():
            exe = os.readlink(f"/proc/{info.pid}/exe")
        else:
            exe = psutil.Process(info.pid).exe()
    except (OSError, psutil.Error):
        return None
    # A binary replaced (upgraded) under a running process reads as "<path> (deleted)".
    exe = exe.removesuffix(" (deleted)")
    matches = os.path.realpath(argv0) == exe
    if _same_birth(info.pid, info.start_time) is None:
        return None  # the executable read may have been another birth's
    return matches


def _environ_keys_sync(
    procs: Sequence[ProcInfo], keys: Sequence[str]
) -> dict[tuple[int, int], dict[str, str]]:
    out: dict[tuple[int, int], dict[str, str]] = {}
    via_proc = _has_proc()
    for info in procs:
        if info.pid <= 0 or info.zombie or info.unreadable:
            continue
        if via_proc:
            raw = environ_bytes(info.pid)
            found = pick_keys(raw, keys) if raw else {}
        else:
            try:
                env = psutil.Process(info.pid).environ()
            except (psutil.Error, OSError):
                continue
            found = {k: env[k] for k in keys if k in env}
        if not found or not runs_as_service(info.pid):
            continue
        # Read after the environment: the same birth still holds the PID, so
        # what was read was that process's (a newer birth has another start time).
        again = _same_birth(info.pid, info.start_time)
        if again is not None and not again.zombie:
            out[info.identity] = found
    return out


def _still_ours(pid: int, start_time: int) -> bool:
    """``pid`` is the birth ``start_time`` and runs entirely as this service's user (the
    birth read again after the uids: they were that birth's). Every signal asks first."""
    info = _info_sync(pid)
    if info is None or info.start_time != start_time:
        return False
    if not runs_as_service(pid):
        log.warning("process_not_ours", pid=pid, why="another user's, or its uid unreadable")
        return False
    return _same_birth(pid, start_time) is not None


def _signal_sync(pid: int, start_time: int, sig: int) -> bool:
    if pid <= 1:
        return False  # never PID 0 (own group) or 1 (init), whatever a record says
    if hasattr(os, "pidfd_open") and hasattr(signal_mod, "pidfd_send_signal"):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        try:
            # The pidfd pins this exact process; checking its start time now
            # proves the pidfd is the birth we verified.
            if not _still_ours(pid, start_time):
                return False
            try:
                signal_mod.pidfd_send_signal(fd, sig)
            except ProcessLookupError:
                return False
            return True
        finally:
            os.close(fd)
    if not _still_ours(pid, start_time):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


class PsutilProcessTable:
    """The host's process table (psutil + ``/proc``), read off the event loop."""

    async def get(self, pid: int) -> ProcInfo | None:
        """See :meth:`ProcessTable.get`."""
        if pid <= 0:
            return None
        return await asyncio.to_thread(_info_sync, pid)

    async def list_all(self) -> list[ProcInfo]:
        """See :meth:`ProcessTable.list_all`."""
        return await asyncio.to_thread(_list_sync)

    async def environ(self, pid: int, start_time: int) -> Mapping[str, str] | None:
        """See :meth:`ProcessTable.environ`."""
        return await asyncio.to_thread(_environ_sync, pid, start_time)

    async def environ_keys(
        self, procs: Sequence[ProcInfo], keys: Sequence[str]
    ) -> dict[tuple[int, int], dict[str, str]]:
        """See :meth:`ProcessTable.environ_keys`."""
        return await asyncio.to_thread(_environ_keys_sync, list(procs), tuple(keys))

    async def runs_argv0(self, info: ProcInfo) -> bool | None:
        """See :meth:`ProcessTable.runs_argv0`."""
        return await asyncio.to_thread(_runs_argv0_sync, info)

    async def runs_as_service(self, info: ProcInfo) -> bool:
        """See :meth:`ProcessTable.runs_as_service`."""
        return await asyncio.to_thread(_still_ours, info.pid, info.start_time)

    async def signal(self, pid: int, start_time: int, sig: int) -> bool:
        """See :meth:`ProcessTable.signal`."""
        try:
            return await asyncio.to_thread(_signal_sync, pid, start_time, sig)
        except (ProcessTableError, OSError, ValueError) as exc:
            # Permission denied by pidfd_open/pidfd_send_signal/kill, or the identity
            # could not be re-read: not delivered, the process stays a survivor.
            log.warning("signal_failed", pid=pid, sig=int(sig), why=f"{type(exc).__name__}: {exc}")
            return False


# ---------------------------------------------------------------------- fake table

#: The uid the simulated service (and, unless told otherwise, every process) runs as.
FAKE_SERVICE_UID = 1000


@dataclass
class FakeProc:
    """A simulated process."""

    pid: int
    ppid: int
    pgid: int
    start_time: int
    cmdline: tuple[str, ...] = ()
    exe: str = ""
    #: None = unreadable (permission denied).
    environ: dict[str, str] | None = field(default_factory=dict)
    #: Survives SIGTERM/SIGINT/SIGHUP (only SIGKILL ends it).
    ignores_term: bool = False
    #: Exists but cannot be read (e.g. /proc/<pid>/stat permission denied).
    unreadable: bool = False
    #: Its (real, effective) uid; None: ``/proc/<pid>/status`` unreadable. A set-uid
    #: program shows as two uids, another user's process as theirs.
    uids: tuple[int, int] | None = (FAKE_SERVICE_UID, FAKE_SERVICE_UID)

    def info(self) -> ProcInfo:
        """Its :class:`ProcInfo`."""
        if self.unreadable:
            return ProcInfo.unreadable_pid(self.pid)
        return ProcInfo(self.pid, self.ppid, self.pgid, self.start_time, self.cmdline, self.exe)


class FakeProcessTable:
    """An in-memory process table for the lifecycle simulator.

    Signals are recorded in :attr:`signals` as ``(pid, start_time, sig)``. A
    terminating signal removes the process unless it ignores SIGTERM; its
    children are re-parented to ``reparent_to``. Setting
    :attr:`listing_available` False makes every read fail closed.
    """

    def __init__(self, procs: list[FakeProc] | None = None, *, reparent_to: int = 1) -> None:
        self.procs: dict[int, FakeProc] = {p.pid: p for p in procs or []}
        self.signals: list[tuple[int, int, int]] = []
        self.listing_available = True
        self.reparent_to = reparent_to
        #: The simulated service's effective uid: only processes all of this uid are its.
        self.service_uid = FAKE_SERVICE_UID
        #: How many times :meth:`environ_keys` scanned (the scan is meant to be rare).
        self.environ_scans = 0
        #: Called after every signal (tests use it to swap processes mid-reap).
        self.after_signal: Callable[[FakeProcessTable, int, int], None] | None = None

    def add(self, proc: FakeProc) -> FakeProc:
        """Add (or replace) a process."""
        self.procs[proc.pid] = proc
        return proc

    def remove(self, pid: int) -> None:
        """A process exits: children are re-parented, as the kernel does."""
        self.procs.pop(pid, None)
        for child in self.procs.values():
            if child.ppid == pid:
                child.ppid = self.reparent_to

    def alive(self, pid: int, start_time: int | None = None) -> bool:
        """True if ``pid`` (with that birth, when given) is in the table."""
        proc = self.procs.get(pid)
        return proc is not None and (start_time is None or proc.start_time == start_time)

    def _check(self) -> None:
        if not self.listing_available:
            raise ProcessTableError("process listing unavailable (simulated)")

    async def get(self, pid: int) -> ProcInfo | None:
        """See :meth:`ProcessTable.get`."""
        self._check()
        proc = self.procs.get(pid)
        if proc is not None and proc.unreadable:
            raise ProcessTableError(f"cannot read process {pid} (simulated)")
        return proc.info() if proc is not None else None

    async def list_all(self) -> list[ProcInfo]:
        """See :meth:`ProcessTable.list_all`."""
        self._check()
        return [p.info() for p in self.procs.values()]

    async def environ(self, pid: int, start_time: int) -> Mapping[str, str] | None:
        """See :meth:`ProcessTable.environ`."""
        proc = self.procs.get(pid)
        if proc is None or proc.unreadable or proc.start_time != start_time or proc.environ is None:
            return None
        return dict(proc.environ)

    async def environ_keys(
        self, procs: Sequence[ProcInfo], keys: Sequence[str]
    ) -> dict[tuple[int, int], dict[str, str]]:
        """See :meth:`ProcessTable.environ_keys`."""
        self.environ_scans += 1
        out: dict[tuple[int, int], dict[str, str]] = {}
        for info in procs:
            proc = self.procs.get(info.pid)
            if proc is None or proc.unreadable or proc.start_time != info.start_time:
                continue
            if not self._ours(proc):
                continue
            found = {k: proc.environ[k] for k in keys if proc.environ and k in proc.environ}
            if found:
                out[info.identity] = found
        return out

    async def runs_argv0(self, info: ProcInfo) -> bool | None:
        """See :meth:`ProcessTable.runs_argv0` (no symlinks here: the strings must agree)."""
        proc = self.procs.get(info.pid)
        if proc is None or proc.unreadable or proc.start_time != info.start_time or not proc.exe:
            return None
        return bool(proc.cmdline) and proc.exe == proc.cmdline[0]

    def _ours(self, proc: FakeProc) -> bool:
        return proc.uids == (self.service_uid, self.service_uid)

    async def runs_as_service(self, info: ProcInfo) -> bool:
        """See :meth:`ProcessTable.runs_as_service`."""
        proc = self.procs.get(info.pid)
        return proc is not None and proc.start_time == info.start_time and self._ours(proc)

    async def signal(self, pid: int, start_time: int, sig: int) -> bool:
        """See :meth:`ProcessTable.signal` (another user's process: refused, not recorded)."""
        proc = self.procs.get(pid)
        if proc is None or proc.unreadable or proc.start_time != start_time or pid <= 1 \
                or not self._ours(proc):
            return False
        self.signals.append((pid, start_time, sig))
        if sig == signal_mod.SIGKILL or (
            sig in (signal_mod.SIGTERM, signal_mod.SIGINT, signal_mod.SIGHUP)
            and not proc.ignores_term
        ):
            self.remove(pid)
        if self.after_signal is not None:
            self.after_signal(self, pid, sig)
        return True

    def signalled_pids(self) -> set[int]:
        """Every PID that received any signal."""
        return {pid for pid, _, _ in self.signals}

    def snapshot(self, pid: int) -> FakeProc | None:
        """A copy of one simulated process (for assertions)."""
        proc = self.procs.get(pid)
        return replace(proc) if proc is not None else None
