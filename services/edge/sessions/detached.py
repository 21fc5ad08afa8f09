"""The sessions an edge holds for no client: detached, waiting for their owner's next
connection (:mod:`services.edge.sessions.clients`).

Nothing watches them through a connection, so what ends a connection's sessions must
reach these too: a revoked token (:func:`of_tokens`) and a stopping edge
(:func:`cancel_turns`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from services.common.logs import get_logger
from services.common.principals import token_id_of

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["cancel_turns", "of_tokens", "token_ids"]

log = get_logger("edge.detached")


def token_ids(sessions: Iterable[EdgeSession]) -> set[str]:
    """The ids of the gateway tokens whose sessions among ``sessions`` wait detached."""
    return {tid for s in sessions if not s.attached.is_set() and (tid := token_id_of(s.principal))}


def of_tokens(sessions: Iterable[EdgeSession], ids: set[str]) -> list[EdgeSession]:
    """The detached sessions among ``sessions`` that belong to the tokens ``ids``."""
    return [s for s in sessions if not s.attached.is_set() and token_id_of(s.principal) in ids]


async def cancel_turns(sessions: Iterable[EdgeSession], wait_secs: float) -> int:
    """The edge stops: cancel the running turns of the detached ``sessions`` as a stop
    cancels a connected client's (stored with what they streamed), and wait at most
    ``wait_secs`` for them to end — the caller then releases them all the same, and a turn
    still running then is not stored. How many were cancelled."""
    waits = [s.wait_turn() for s in list(sessions) if not s.attached.is_set() and s.cancel()]
    if waits:
        log.info("detached_turns_cancelled", turns=len(waits))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), wait_secs)
    return len(waits)
