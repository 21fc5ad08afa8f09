"""Our own requests to the other side: ids, and the futures waiting for their answers.

Correlation is per direction: this table only holds *our* outbound ids, so a
request from the other side that happens to reuse one of them is served as a
request, never taken for an answer. Answers are matched by the id's string
form (SPEC §1): an answer to ``0`` may come back as ``"0"``. The id scheme is
the caller's: ``zc-out-N`` strings toward dialect clients (SPEC §6), integers
toward adapters and from the built-in agent.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from services.common.jsonrpc.wire import JsonRpcError, JsonRpcId

#: Makes the id of the next outbound request.
IdSource = Callable[[], JsonRpcId]


def integer_ids(start: int = 0) -> IdSource:
    """``start``, ``start`` + 1, … (0 by default: the built-in agent's ids, and the edge's
    toward adapters)."""
    return itertools.count(start).__next__


def prefixed_ids(prefix: str) -> IdSource:
    """``<prefix>0``, ``<prefix>1``, … (``zc-out-N`` toward dialect clients, SPEC §6)."""
    counter = itertools.count()
    return lambda: f"{prefix}{next(counter)}"


class PeerClosed(ConnectionError):
    """The other side went away (or stopped reading) before answering."""


class PendingRequests:
    """The open outbound requests of one connection, by the string form of their ids."""

    def __init__(self, next_id: IdSource) -> None:
        self._next_id = next_id
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._closed: Callable[[], BaseException] | None = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` failed everything: no request can be answered any more."""
        return self._closed is not None

    def __len__(self) -> int:
        return len(self._pending)

    def open(self) -> tuple[JsonRpcId, asyncio.Future[Any]]:
        """A fresh id and the future its answer settles; raises the close error once closed."""
        if self._closed is not None:
            raise self._closed()
        req_id = self._next_id()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[str(req_id)] = future
        return req_id, future

    def discard(self, req_id: JsonRpcId) -> None:
        """Forget ``req_id`` (answered, timed out, or its caller gave up)."""
        self._pending.pop(str(req_id), None)

    def settle(self, message: dict[str, Any]) -> bool:
        """Route one response to its request: its ``result``, or a :class:`JsonRpcError`.

        Returns False for an id nobody waits for (unknown, late, answered
        twice): such a response is dropped silently (SPEC §1).
        """
        raw_id = message.get("id")
        future = self._pending.get(raw_id if isinstance(raw_id, str) else str(raw_id))
        if future is None or future.done():
            return False
        if "error" in message:
            future.set_exception(JsonRpcError.from_wire(message["error"]))
        else:
            future.set_result(message.get("result"))
        return True

    def close(self, error: Callable[[], BaseException]) -> None:
        """Nobody can answer any more: fail every open request with ``error()``, refuse new ones.

        Only the first close counts (the first cause is the one callers see).
        """
        if self._closed is not None:
            return
        self._closed = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error())
        self._pending.clear()
