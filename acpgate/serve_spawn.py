"""How ``acpgate serve`` starts a child: in its own process group, with a parent-death
signal, never forking serve itself (see :func:`with_parent_death_signal`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence

__all__ = ["spawn_child", "with_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


#: Runs in the child before the real command: arm the parent-death signal, give up if
#: serve already died (the signal would never come), ignore SIGHUP until the command
#: handles it (a reload forwarded while it starts must not end it: an ignored signal stays
#: ignored across exec), then exec the command in place (same PID, same process group).
#: ``sys.argv[1]`` is serve's PID, the rest the argv.
_PDEATHSIG_EXEC = (
    "import os,signal,sys\n"
    "signal.signal(signal.SIGHUP,signal.SIG_IGN)\n"
    "try:\n"
    " import ctypes\n"
    f" ctypes.CDLL(None,use_errno=True).prctl({_PR_SET_PDEATHSIG},int(signal.SIGTERM),0,0,0)\n"
    "except (OSError,AttributeError):\n"
    " pass\n"
    "if os.getppid()!=int(sys.argv[1]):\n"
    " os._exit(1)\n"
    "os.execv(sys.argv[2],sys.argv[2:])\n"
)


def with_parent_death_signal(python: str, argv: Sequence[str], parent_pid: int) -> list[str]:
    """``argv`` run through a tiny exec trampoline that sets PR_SET_PDEATHSIG=SIGTERM.

    Why not a ``preexec_fn``: that forces a real fork() of serve, which runs gRPC's
    fork handlers in the child of a process whose gRPC threads are busy (the health
    checks); the child then dies before exec now and then (SIGSEGV/SIGABRT, logged
    as "skipping fork() handlers" and "epoll_wait error: Bad file descriptor"). Without
    it, subprocess uses vfork+exec, which runs no fork handlers at all.
    """
    return [python, "-I", "-S", "-c", _PDEATHSIG_EXEC, str(parent_pid), *argv]


async def spawn_child(
    python: str, argv: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int] = ()
) -> asyncio.subprocess.Process:
    """Start ``argv`` in its own process group with the parent-death signal, never
    forking serve (no ``preexec_fn``: see :func:`with_parent_death_signal`); ``pass_fds``
    are inherited under the same numbers."""
    return await asyncio.create_subprocess_exec(
        *with_parent_death_signal(python, argv, os.getpid()),
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        # Own process group: a terminal's Ctrl-C reaches serve only, which keeps the order.
        process_group=0,
        pass_fds=tuple(pass_fds),
    )
