"""The reloadable config of one long-running command: a :class:`LiveConfig` that loads
``config.toml`` the way the command did at start (same config dir, environment and
command-line flags), with the process's log output subscribed (``[logging]`` level,
format and file apply on reload). The command passes it to the parts it runs, which
subscribe what they hold (services.common.live_config)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.config import Config, load_config
from services.common.live_config import LiveConfig
from services.common.log_output import LogPlan, plan_logging, start_logging

__all__ = ["LogFollower", "live_config"]


class LogFollower:
    """Re-plans the log output of ``process`` for each reloaded config; restarts it (off
    the event loop: the writer thread is joined) only when the plan changed."""

    def __init__(self, cfg: Config, process: str, *, file_by_default: bool = True) -> None:
        self._process = process
        self._file_by_default = file_by_default
        self.plan: LogPlan = self._plan(cfg)

    def _plan(self, cfg: Config) -> LogPlan:
        return plan_logging(cfg, self._process, file_by_default=self._file_by_default)

    async def __call__(self, cfg: Config) -> None:
        plan = self._plan(cfg)
        if plan != self.plan:
            self.plan = plan
            await asyncio.to_thread(start_logging, plan)


def live_config(cfg: Config, process: str, overrides: dict[str, Any] | None = None) -> LiveConfig:
    """``cfg``, reloaded from its config dir with ``overrides`` (the command's flags) on
    top, the log output of ``process`` following it."""
    flags = dict(overrides or {})
    live = LiveConfig(cfg, lambda: load_config(cfg.config_dir, overrides=flags))
    live.subscribe(LogFollower(cfg, process))
    return live
