"""One prompt turn of an edge session, start to end (SPEC §4, §7).

:func:`run_turn` sends the prompt to the session's adapter (an external agent
with the client's other params as they came), lets the session relay and
accumulate the streamed updates, and stores the turn in one ``AppendTurn``: a
completed turn, and an external agent's cancelled one with what was streamed
before the cancel (unless the cancel was acpgate's own: ``TurnState.keep``); the
built-in agent's conversation holds completed turns only (SPEC §7). Every event
of the turn is in the session's event log besides. It returns a
:class:`~services.edge.sessions.prompt_result.TurnOutcome`, whoever ran the turn.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INTERNAL_ERROR, STOP_CANCELLED, STORAGE_QUOTA_EXCEEDED
from services.edge.adapter.failures import prompt_error
from services.edge.adapter.link import AdapterGone
from services.edge.adapter.prompt_blocks import AdapterPrompt, carried_blocks
from services.edge.adapter.requests import read_prompt_result
from services.edge.sessions import session_log
from services.edge.sessions.claims import taken_over
from services.edge.sessions.history_wire import cancel_marker_update
from services.edge.sessions.prompt_result import TurnOutcome
from services.edge.sessions.turn import TURN_KEEP_CHARS, TurnAccumulator
from services.edge.sessions.turn_store import store_turn

if TYPE_CHECKING:
    from services.edge.adapter.client import AdapterClient
    from services.edge.sessions.session import EdgeSession, TurnState

#: A turn's state in the event log once it ended normally.
TURN_COMPLETED = "completed"

__all__ = ["CANCEL_GRACE_SECS", "UNASKED_CANCEL_EXIT_SECS", "run_turn"]

#: After a cancel, how long the adapter gets to answer the prompt before the edge ends it.
CANCEL_GRACE_SECS = 10.0
#: How long an adapter that ended a turn as cancelled though nobody asked is given to show
#: whether it is going away (an agent told to terminate answers its prompts so, then exits).
UNASKED_CANCEL_EXIT_SECS = 5.0


async def run_turn(session: EdgeSession, turn: TurnState, prompt: AdapterPrompt,
                   extra: dict[str, Any] | None = None) -> TurnOutcome:
    """The turn ``turn`` of ``session`` with ``prompt`` (module doc)."""
    adapter = session.adapter
    if adapter is None:
        raise JsonRpcError(INTERNAL_ERROR, "Agent is not running")
    sid = session.session_id
    # With the event log on, a long turn's text is not all kept here (it spills to the log).
    keep = TURN_KEEP_CHARS if session.runtime.event_log.enabled else 0
    acc = turn.acc = TurnAccumulator(user_text=prompt.text, keep_chars=keep)
    session_log.prompt(session, turn, prompt.text)
    blocks = carried_blocks(sid, session.pending_history, adapter.builtin or
                            adapter.agent_capabilities.prompt_capabilities.embedded_context)
    blocks.extend(prompt.blocks)
    raw: Any = {"stopReason": STOP_CANCELLED}
    if not turn.cancelled:  # (else cancelled before the adapter saw it)
        try:
            raw = await _await_prompt(adapter, blocks, turn, extra)
        except JsonRpcError:
            if session.taken_over:  # the adapter went with the session: say why
                raise taken_over(sid) from None
            raise
        if session.taken_over:  # whatever the adapter said: the turn is not this host's
            raise taken_over(sid)
        session.pending_history = None
    result = read_prompt_result(raw)
    # The built-in agent's dialect: a cancel the client asked for ends the turn cancelled
    # (SPEC §7); an external agent's own stop reason is passed on as it is.
    cancelled = result.stop_reason == STOP_CANCELLED or (turn.cancelled and adapter.builtin)
    if cancelled and adapter.builtin:  # SPEC §7's marker, as the client sees it live
        await session.publish_own([cancel_marker_update(sid)])
    # The built-in agent's conversation holds completed turns only (SPEC §7); an external
    # agent's keeps a cancelled one, marked, as a direct connection would.
    stored = not cancelled or (turn.keep and not adapter.builtin)
    event_log = session.runtime.event_log
    if stored:  # its events are stored before it: the log covers every stored turn
        await event_log.flush()
    lost = event_log.lost.get(sid)
    if lost:  # the turn streamed, but the store never got it
        raise JsonRpcError(INTERNAL_ERROR, lost)
    over_quota = event_log.quota_refusal(sid, turn.turn_id)
    if over_quota:  # the turn streamed, but a storage quota refused its events
        raise JsonRpcError(STORAGE_QUOTA_EXCEEDED, over_quota)
    if stored:
        if cancelled:
            acc.mark(STOP_CANCELLED)
        async with session.storing:  # a full replay reads the store, or sends it live
            await store_turn(session, acc, result, raw, turn.turn_id)
            session.feed.turn_stored()
    turn.end_state = STOP_CANCELLED if cancelled else TURN_COMPLETED
    await session.state.flush()  # the turn's mode/config/title changes are stored too
    session.runtime.metrics.turns_total += 1
    stop = STOP_CANCELLED if cancelled else result.stop_reason
    return TurnOutcome(stop, acc.text, raw if isinstance(raw, dict) else {"stopReason": stop},
                       adapter.builtin)


async def _await_prompt(adapter: AdapterClient, blocks: list[dict[str, Any]],
                        turn: TurnState, extra: dict[str, Any] | None) -> Any:
    """The adapter's prompt result as it sent it; the turn ends cancelled when the adapter
    ignores a cancel for :data:`CANCEL_GRACE_SECS`."""
    task = asyncio.ensure_future(adapter.prompt(blocks, turn.autonomy_cap, extra))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_SECS)
            if done:
                raw = task.result()
                if read_prompt_result(raw).stop_reason == STOP_CANCELLED:
                    # Its agent died (wrapper killed)?
                    gone = await adapter.link.exited(
                        0.0 if turn.cancelled else UNASKED_CANCEL_EXIT_SECS)
                    if gone is not None:
                        raise AdapterGone(gone)
                return raw
            if turn.cancelled:  # the adapter ignored session/cancel: end the turn here
                task.cancel()
                return {"stopReason": STOP_CANCELLED}
    except (AdapterGone, JsonRpcError) as exc:
        raise prompt_error(exc, adapter.secrets, adapter.alias) from None
    finally:
        if not task.done():
            task.cancel()
