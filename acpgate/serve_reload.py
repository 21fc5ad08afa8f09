"""``SIGHUP`` to ``acpgate serve``: reload the config here, then in every child.

serve re-reads config.toml (:class:`~services.common.live_config.LiveConfig`) and logs
what changed (``config_reloaded``, naming the changed keys that need a restart) or why
the file was refused (``config_reload_refused``: the running config stays, and no child
is asked). For a valid file it forwards the signal to each running child — the session
service, the lifecycle service, the edge worker(s) — which re-reads the file itself and
applies what it holds (aliases and agents, limits, logs), each logging its own line.
A child ignores SIGHUP until it handles it (serve's exec trampoline), so a reload that
reaches one still starting never ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from services.common.live_config import LiveConfig
from services.common.signals import RELOAD_SIGNAL, install_reload_signal

if TYPE_CHECKING:
    from acpgate.serve_supervisor import Supervisor

__all__ = ["install_serve_reload", "reload_serve"]


async def reload_serve(supervisor: Supervisor, live: LiveConfig) -> None:
    """Reload ``live``; the file valid, SIGHUP each running child of ``supervisor``."""
    if await live.reload() is None or supervisor.stopping:
        return
    supervisor.cfg = live.current
    for child in supervisor.children:
        proc = child.process
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(RELOAD_SIGNAL)


def install_serve_reload(supervisor: Supervisor, live: LiveConfig) -> Callable[[], None]:
    """Run :func:`reload_serve` on every SIGHUP (one at a time: ``live`` serializes);
    returns the function removing the handler."""
    tasks: set[asyncio.Task[None]] = set()

    def on_signal() -> None:
        task = asyncio.get_running_loop().create_task(reload_serve(supervisor, live),
                                                      name="serve-reload")
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return install_reload_signal(on_signal)
