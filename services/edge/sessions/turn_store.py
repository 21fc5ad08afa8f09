"""Storing a completed turn: one ``AppendTurn``, fenced by this host's claim (SPEC §8).

The turn goes to the session service with this host's instance id and the
generation of its claim on the session (:meth:`services.edge.sessions.claims.HostClaims.fence`).
The store writes it only while that claim is still the row's, in the turn's own
transaction, so a host that was cut off past its lease — and whose session
another host took over meanwhile — cannot store a turn after the new holder's.
Such a refusal (ABORTED) ends the session on this host and answers the prompt
with :func:`~services.edge.sessions.claims.taken_over`; a turn over a storage quota
(RESOURCE_EXHAUSTED) answers the quota's sentence, nothing of it stored. A store that
cannot be reached is waited for (:data:`OUTAGE_WAIT_SECS`): an outage shorter than that
delays the turn's answer instead of failing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from services.common.acp.schema import PromptResponse
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import INTERNAL_ERROR, STORAGE_QUOTA_EXCEEDED
from services.edge.backends.errors import Failure, ServiceError
from services.edge.sessions.claims import taken_over
from services.edge.sessions.turn import TurnAccumulator, turn_usage

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["store_turn"]

log = get_logger("edge.session")

#: How long a completed turn waits for an unreachable store before it fails.
OUTAGE_WAIT_SECS: Final = 120.0


async def store_turn(session: EdgeSession, acc: TurnAccumulator, result: PromptResponse,
                     raw: Any = None, turn_id: int = 0) -> None:
    """Append the turn ``acc`` accumulated (with ``result``'s usage — or, without one, the
    tokens in ``raw``'s ``_meta.quota``: ``raw`` is the result as the adapter sent it); the
    errors above. A turn that spilled (``acc.spilled``) is sent as its user item and its
    log id ``turn_id``: the session service builds the rest from the log."""
    rt = session.runtime
    sid = session.session_id
    usage = turn_usage(result, raw)
    holder, generation = rt.claims.fence(sid)
    items, plan_json = acc.items, acc.plan_json
    if usage is not None:
        rt.metrics.count_tokens(usage.input_tokens, usage.output_tokens)
    # The turn's events are stored before the turn: the log covers every stored turn.
    log_turn_id = turn_id if acc.spilled and turn_id else 0
    if log_turn_id:
        await _flushed(session)
    else:
        await rt.event_log.flush()

    def append() -> Awaitable[None]:
        return rt.session_service.append_turn(
            sid, items, token_delta=usage.input_tokens + usage.output_tokens if usage else 0,
            holder_instance_id=holder, claim_generation=generation, usage=usage,
            plan_json=plan_json, log_turn_id=log_turn_id)

    try:
        await _append(session, append)  # the store titles the row from turn one
    except ServiceError as exc:
        if exc.kind is Failure.CONFLICT:  # fenced: another host holds the claim now
            log.warning("turn_fenced", session_id=sid, generation=generation)
            session.lose()
            raise taken_over(sid) from None
        if exc.kind is Failure.EXHAUSTED:
            raise JsonRpcError(STORAGE_QUOTA_EXCEEDED, exc.detail) from None
        log.error("append_turn_failed", session_id=sid, code=exc.code)
        raise JsonRpcError(INTERNAL_ERROR,
                           f"Turn completed but could not be stored: {exc.code}") from None


async def _flushed(session: EdgeSession) -> None:
    """Wait until the event log holds every event handed in so far (a spilled turn's items
    are built from it), for at most :data:`OUTAGE_WAIT_SECS`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + OUTAGE_WAIT_SECS
    while not await session.runtime.event_log.flush():
        if session.taken_over or loop.time() > deadline:
            raise JsonRpcError(INTERNAL_ERROR, "Turn completed but could not be stored: "
                                               "UNAVAILABLE")
        log.info("event_log_waiting", session_id=session.session_id)


async def _append(session: EdgeSession, append: Callable[[], Awaitable[None]]) -> None:
    """``AppendTurn``, tried again while the store is unreachable, for at most
    :data:`OUTAGE_WAIT_SECS` (the turn's events wait in the event log meanwhile)."""
    deadline = asyncio.get_running_loop().time() + OUTAGE_WAIT_SECS
    pause = 0.1
    while True:
        try:
            await append()
            return
        except ServiceError as exc:
            if exc.kind is not Failure.UNAVAILABLE or session.taken_over \
                    or asyncio.get_running_loop().time() + pause > deadline:
                raise
            log.info("append_turn_waiting", session_id=session.session_id)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)
