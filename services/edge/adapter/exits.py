"""How an adapter's link ended (:class:`AdapterExit`), the error of a request it left
unanswered (:class:`AdapterGone`), and the link's small helpers."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import METHOD_NOT_FOUND, MSG_AGENT_LINE_TOO_LONG, MSG_METHOD_NOT_FOUND

__all__ = ["AdapterExit", "AdapterGone", "method_not_found", "seen"]


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


def seen(future: asyncio.Future[Any]) -> None:
    """Done callback: mark a failed future's exception as retrieved (a failure nobody
    awaits any more is nobody's error; whoever still awaits it gets it all the same)."""
    if not future.cancelled():
        future.exception()


def method_not_found(method: str) -> JsonRpcError:
    """The -32601 answer to an adapter→client method we do not serve."""
    return JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))
