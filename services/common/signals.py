"""Turning SIGINT/SIGTERM (and friends) into an asyncio event, and SIGHUP into a config
reload, for every long-running command."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterable

DEFAULT_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Re-read config.toml and apply what can change while running.
RELOAD_SIGNAL = signal.SIGHUP


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
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(RELOAD_SIGNAL, reload)
    except (NotImplementedError, RuntimeError, ValueError):
        return lambda: None

    def remove() -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(RELOAD_SIGNAL)

    return remove
