"""What a session's agent finishes after the turn it belongs to was stored, stored too.

A v2 agent's child session may end after its parent's turn did (the agent answered, the
child ran on): the child's card (:mod:`services.common.acp.v2.child_cards`) gets its
final status and the child's last text then, while no turn accumulates the session's
updates — and so does a tool call the agent ran in the background. The event log holds
those updates like any other, but the stored history (what a fork copies, what an agent
that cannot restore itself is carried over, what the session tools read) would keep the
call unfinished forever. :func:`late_items` picks what such updates finished
(:func:`~services.common.turn_items.finished_calls`) and :func:`store_late` appends it to
the session's history as an entry of its own, after the turn it belongs to — fenced by
this host's claim like a turn, under the session's ``storing`` lock (a replay reading
the store never sees half of it). The caller (the session's relay) calls
:func:`late_items` for the updates relayed while no turn accumulates and spawns
:func:`store_late` when it returns any.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from services.common.logs import CountedWarning, get_logger
from services.common.turn_items import finished_calls
from services.edge.backends.errors import ServiceError

if TYPE_CHECKING:
    from services.edge.backends.session_types import HistoryItem
    from services.edge.sessions.turn import TurnContext

__all__ = ["late_items", "store_late"]

log = get_logger("edge.late_results")


def late_items(updates: Sequence[dict[str, Any]],
               odd: CountedWarning | None = None) -> list[HistoryItem]:
    """The history items of what ``updates`` (relayed while no turn accumulates) finished;
    none for most (``odd``: told of an update that failed to record)."""
    return finished_calls(updates, odd)


async def store_late(ctx: TurnContext, items: list[HistoryItem]) -> None:
    """Append ``items`` to the session's stored history (module doc); a failure is logged
    (the event log still holds the updates)."""
    sid = ctx.session_id
    if ctx.taken_over():
        return
    async with ctx.storing:
        await ctx.event_log.flush()  # the log covers whatever the store holds
        holder, generation = ctx.claims.fence(sid)
        try:
            await ctx.service.append_turn(sid, items, token_delta=0, holder_instance_id=holder,
                                          claim_generation=generation)
        except ServiceError as exc:
            log.warning("late_result_not_stored", session_id=sid, code=exc.code,
                        items=len(items))
            return
    log.info("late_result_stored", session_id=sid, items=len(items))
