"""One restore of a session id at a time (the built-in agent's ``session/resume|load``).

A pipelined client may send a prompt right behind the resume that creates the
session, or a second resume of the same id: both wait until the first restore
is done, then see the session it made.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["Restoring"]


class Restoring:
    """The restores in progress, by session id."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Future[None]] = {}

    async def wait(self, sid: str) -> None:
        """Return once no restore of ``sid`` runs (at once when none does)."""
        running = self._running.get(sid)
        if running is not None:
            await asyncio.wait({running})

    @asynccontextmanager
    async def exclusive(self, sid: str) -> AsyncIterator[None]:
        """Run a restore of ``sid`` after any earlier one; later requests wait for it."""
        await self.wait(sid)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._running[sid] = done
        try:
            yield
        finally:
            done.set_result(None)
            if self._running.get(sid) is done:
                del self._running[sid]
