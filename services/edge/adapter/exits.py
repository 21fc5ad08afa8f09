"""How an adapter's link ended (:class:`AdapterExit`), and the error of a request it left
unanswered (:class:`AdapterGone`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from services.common.protocol import MSG_AGENT_LINE_TOO_LONG

__all__ = ["AdapterExit", "AdapterGone"]


@dataclass(frozen=True)
class AdapterExit:
    """How an adapter's stream ended."""

    exit_code: int = -1
    signal: int = 0
    #: True when the lifecycle stream broke without an exit report (or the pipes did not
    #: arrive whole).
    lost: bool = False
    #: The last lines of the adapter's stderr as the lifecycle service read them (raw:
    #: may hold secrets; :mod:`services.edge.adapter.failures` bounds and scrubs them).
    stderr_tail: str = ""
    #: Not an exit: the adapter wrote a line over this many bytes (dropped by the lifecycle
    #: service, or by the edge where it holds the pipes), and the edge gave the adapter up
    #: (0: not that).
    line_limit: int = 0

    def describe(self) -> str:
        """A short cause for error messages (never stderr contents: they may hold secrets)."""
        if self.line_limit:
            return MSG_AGENT_LINE_TOO_LONG.format(limit=self.line_limit)
        if self.lost:
            return "agent process connection lost"
        if self.signal:
            try:
                name = f"{signal.Signals(self.signal).name}, "
            except ValueError:
                name = ""
            return f"agent process exited (killed by {name}signal {self.signal})"
        return f"agent process exited (exit code {self.exit_code})"


class AdapterGone(Exception):
    """The adapter exited (or its stream broke) before answering."""

    def __init__(self, exit_info: AdapterExit) -> None:
        super().__init__(exit_info.describe())
        self.exit_info = exit_info
