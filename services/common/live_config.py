"""A running process's configuration, reloaded in place on ``SIGHUP``.

:class:`LiveConfig` holds the config a process runs on, and how to load it again
(its ``source``: ``config.toml`` with the same environment and command-line flags
as at start). :meth:`LiveConfig.reload` reads the file off the event loop, and:

- an invalid file is logged (``config_reload_refused``, the file and key its error
  names) and the running config stays — the process never stops over it;
- otherwise the new config (:func:`services.common.config.reload.reloaded`: its
  reloadable keys, the running value of the others) replaces the running one as one
  reference, then each part that holds config (the session service's aliases, the
  edge's limits, the log output) is handed it by the callback it subscribed, and one
  line says what changed and which changed keys need a restart (``config_reloaded``).

Reloads run one at a time. Nothing here is global: the composing command creates
one per process and passes it to the parts that subscribe.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

from services.common.config import Config, ConfigError
from services.common.config.reload import ConfigChange, describe, reloaded
from services.common.logs import get_logger

__all__ = ["Applier", "ConfigSource", "LiveConfig", "log_safe"]

log = get_logger("config")

#: Loads the config again as the process loaded it at start (raises ConfigError).
ConfigSource = Callable[[], Config]
#: Takes the reloaded config into one part of the process (may be a coroutine).
Applier = Callable[[Config], Awaitable[None] | None]

#: A refused value quoted in a ConfigError (``got '…'``): never written to a log.
_QUOTED_VALUE = re.compile(r"got .*$")


def log_safe(error: ConfigError) -> str:
    """``error``'s message without the value it quotes (it may be a key put in the wrong
    place); the file, the section and the key stay."""
    return _QUOTED_VALUE.sub("got a value of the wrong kind", str(error))


class LiveConfig:
    """The config one process runs on, and its reload."""

    def __init__(self, current: Config, source: ConfigSource) -> None:
        self.current = current
        self._source = source
        self._appliers: list[Applier] = []
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    def subscribe(self, applier: Applier) -> None:
        """Hand ``applier`` every reloaded config from now on."""
        self._appliers.append(applier)

    async def reload(self) -> ConfigChange | None:
        """Load, check and apply the config; the change, or None when the file was refused
        (logged; the running config stays)."""
        async with self._lock:
            try:
                new = await asyncio.to_thread(self._source)
            except ConfigError as exc:
                log.error("config_reload_refused", error=log_safe(exc),
                          kept="the running config")
                return None
            change = describe(self.current, new)
            self.current = reloaded(self.current, new)
            for applier in self._appliers:
                try:
                    done = applier(self.current)
                    if inspect.isawaitable(done):
                        await done
                except Exception as exc:  # one part failing leaves the others applied
                    log.error("config_apply_failed", error=f"{type(exc).__name__}: {exc}")
            log.info("config_reloaded", applied=list(change.applied),
                     restart_needed=list(change.restart))
            return change

    def reload_soon(self) -> asyncio.Task[ConfigChange | None]:
        """:meth:`reload` in the background (what a signal handler calls)."""
        task = asyncio.get_running_loop().create_task(self.reload(), name="config-reload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
