"""Turning SIGINT/SIGTERM (and friends) into an asyncio event, SIGHUP into a config
reload, and the hot restart's two signals into calls, for every long-running command."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterable

from services.common.log_output import stop_logging

DEFAULT_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Re-read config.toml and apply what can change while running.
RELOAD_SIGNAL = signal.SIGHUP
#: To ``acpgate serve``: start a new serve that takes over from this one (a hot restart).
REPLACE_SIGNAL = signal.SIGUSR2
#: From ``acpgate serve`` to its edge and lifecycle children during a hot restart: go, and
#: leave the sessions and agents running for the successors to take up.
STEP_DOWN_SIGNAL = signal.SIGUSR1


def install_stop_signals(
    stop: asyncio.Event, signals: Iterable[signal.Signals] = DEFAULT_STOP_SIGNALS
) -> Callable[[], None]:
    """Set ``stop`` when one of ``signals`` arrives; returns a function removing the handlers.

    Where the loop cannot install handlers (not the main thread, no Unix
    signals) the signal is skipped: the caller still stops on its other paths.
    """
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)

    def remove() -> None:
        for sig in installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)

    return remove


def install_reload_signal(reload: Callable[[], object]) -> Callable[[], None]:
    """Call ``reload`` (on the loop) whenever :data:`RELOAD_SIGNAL` arrives, instead of the
    default of ending the process; returns a function removing the handler."""
    return install_signal(RELOAD_SIGNAL, reload)


def install_signal(sig: signal.Signals, call: Callable[[], object]) -> Callable[[], None]:
    """Call ``call`` (on the loop) whenever ``sig`` arrives, instead of its default action;
    returns a function removing the handler (a no-op where none could be installed)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(sig, call)
    except (NotImplementedError, RuntimeError, ValueError):
        return lambda: None

    def remove() -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)

    return remove


def exit_now(code: int) -> None:
    """End this process at once with ``code``, after the queued log lines are written: no
    cleanup runs (a hot restart's stepping-down child leaves its sessions and agents to
    its successor, which cleanup would end)."""
    with contextlib.suppress(Exception):
        stop_logging()
    os._exit(code)
