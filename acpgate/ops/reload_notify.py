"""After ``acpgate config set``: have the running processes of this install reload.

The processes are those of ``<data dir>/run/endpoints`` (``acpgate serve``, each
``acpgate acp``; :mod:`acpgate.ops.endpoints`); each gets ``SIGHUP`` (serve forwards it
to its children). A record is only a claim, so a PID is signalled only when all of this
holds, checked on a pidfd of the process (so the PID cannot be reused between the check
and the signal):

- it runs as this user, and started when its record says (a reused PID has another
  start time);
- its command line is acpgate's, running the sub-command its record names
  (``… -m acpgate serve …`` or the ``acpgate`` script).

A stale or forged record is skipped (and named): ``config set`` never signals a process
that is not a running acpgate of this user.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from acpgate.ops.endpoints import Endpoint, live_endpoints
from services.common.config import Config
from services.common.config.reload import ConfigChange, describe, needs_restart
from services.common.signals import RELOAD_SIGNAL

__all__ = ["Notified", "after_set", "is_acpgate_command", "notify_running", "report"]

#: Start times closer than this are the same process (psutil rounds).
_SAME_START_SECS = 1.0


def is_acpgate_command(cmdline: Sequence[str], command: str) -> bool:
    """True when ``cmdline`` runs ``acpgate <command>``: the ``acpgate`` script (run
    itself, or by an interpreter), or ``python [-flags…] -m acpgate <command>``."""
    args = list(cmdline)
    if args and os.path.basename(args[0]) == "acpgate":
        rest = args[1:]
    elif len(args) > 1 and os.path.basename(args[1]) == "acpgate" \
            and os.path.basename(args[0]).startswith("python"):
        rest = args[2:]
    else:
        i = 1  # interpreter flags (-I, -S, -u…) may stand before -m; -c never
        while i < len(args) and args[i].startswith("-") and args[i] not in ("-m", "-c"):
            i += 1
        if args[i:i + 2] != ["-m", "acpgate"]:
            return False
        rest = args[i + 2:]
    return bool(rest) and rest[0] == command


def _verified(endpoint: Endpoint, proc: psutil.Process) -> bool:
    """The process is the running acpgate its record names, of this user."""
    try:
        with proc.oneshot():
            return (proc.uids().real == os.getuid()
                    and abs(proc.create_time() - endpoint.created) < _SAME_START_SECS
                    and proc.status() != psutil.STATUS_ZOMBIE
                    and is_acpgate_command(proc.cmdline(), endpoint.process))
    except psutil.Error:
        return False


def _signal(endpoint: Endpoint) -> bool:
    """SIGHUP ``endpoint``'s process if it is verified; True when sent."""
    if endpoint.pid <= 1 or endpoint.pid == os.getpid():
        return False
    try:
        pidfd = os.pidfd_open(endpoint.pid)
    except OSError:
        return False
    try:
        if not _verified(endpoint, psutil.Process(endpoint.pid)):
            return False
        signal.pidfd_send_signal(pidfd, RELOAD_SIGNAL)
        return True
    except (OSError, psutil.Error):
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(pidfd)


@dataclass(frozen=True)
class Notified:
    """Which processes were asked to reload, and which records were skipped."""

    reloaded: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def notify_running(data_dir: Path) -> Notified:
    """SIGHUP every verified process of ``data_dir``'s endpoints (blocking: files, /proc)."""
    sent: list[str] = []
    skipped: list[str] = []
    for endpoint in live_endpoints(data_dir):
        (sent if _signal(endpoint) else skipped).append(endpoint.name)
    return Notified(tuple(sent), tuple(skipped))


def report(change: ConfigChange, notified: Notified) -> list[str]:
    """What ``config set`` prints after the value: who reloads, what needs a restart."""
    lines: list[str] = []
    running = ", ".join(notified.reloaded)
    if not notified.reloaded:
        lines.append("no acpgate process of this install is running: the change takes "
                     "effect at the next start")
    elif change.empty:
        lines.append(f"unchanged; reloaded anyway: {running}")
    else:
        if change.applied:
            lines.append(f"applied by {running}: {', '.join(change.applied)} (each logs "
                         "config_reloaded)")
        if change.restart:
            lines.append(f"needs a restart of {running} to take effect: "
                         f"{', '.join(change.restart)}")
    if notified.skipped:
        lines.append(f"not signalled (stale or not acpgate): {', '.join(notified.skipped)}")
    return lines


def after_set(before: Config | None, after: Config, key: str) -> list[str]:
    """``config set KEY`` changed ``before`` (None: the file did not load) into ``after``:
    signal the running processes (of the data dir they run on) and say what they do."""
    if before is not None:
        change = describe(before, after)
    else:
        change = ConfigChange(restart=(key,)) if needs_restart(key) else \
            ConfigChange(applied=(key,))
    data_dir = (before or after).data_dir
    return report(change, notify_running(data_dir))
