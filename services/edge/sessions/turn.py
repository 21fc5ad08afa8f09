"""One prompt turn of an edge session, start to end (SPEC §4, §7, §8): its slot, its running,
its storing, and the turn accumulator the edge runs.

:func:`run_turn` sends the prompt to the session's adapter (an external agent
with the client's other params as they came), lets the session relay and
accumulate the streamed updates, and stores the turn in one ``AppendTurn``: a
completed turn, and an external agent's cancelled one with what was streamed
before the cancel (unless the cancel was acpgate's own: ``TurnState.keep``); the
built-in agent's conversation holds completed turns only (SPEC §7). Every event
of the turn is in the session's event log besides. It returns a
:class:`~services.edge.sessions.prompt_result.TurnOutcome`, whoever ran the turn.

Storing a completed turn: one ``AppendTurn``, fenced by this host's claim (SPEC §8).
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

:class:`~services.common.turn_items.TurnAccumulator` builds a turn's history items (the
session service builds them with it from the log for a turn that spilled);
:func:`turn_usage` is the prompt result's usage as stored with the turn.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import grpc

from acpgate_contracts.session.v1 import session_pb2
from services.common.acp.schema import PromptResponse
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import INTERNAL_ERROR, STOP_CANCELLED, STORAGE_QUOTA_EXCEEDED
from services.common.turn_items import TEXT_BLOCK_CHUNKS, TurnAccumulator
from services.edge.adapter.failures import prompt_error
from services.edge.adapter.link import AdapterGone
from services.edge.adapter.prompt_blocks import AdapterPrompt, carried_blocks
from services.edge.adapter.requests import read_prompt_result
from services.edge.sessions import session_log
from services.edge.sessions.claims import taken_over
from services.edge.sessions.history_wire import cancel_marker_update
from services.edge.sessions.prompt_result import TurnOutcome

if TYPE_CHECKING:
    from services.edge.adapter.client import AdapterClient
    from services.edge.sessions.session import EdgeSession

__all__ = ["CANCEL_GRACE_SECS", "TEXT_BLOCK_CHUNKS", "TURN_KEEP_CHARS", "UNASKED_CANCEL_EXIT_SECS",
           "TurnAccumulator", "TurnState", "run_turn", "store_turn", "turn_usage"]

log = get_logger("edge.session")

#: The most text of a running turn the edge keeps (characters); past it the turn spills
#: and the session service builds its items from the event log.
TURN_KEEP_CHARS: Final = 1 << 20


def _quota_usage(raw: Any) -> session_pb2.TurnUsage | None:
    """The tokens of a prompt result's ``_meta.quota.token_count`` (gemini-cli reports its
    usage there, not in ``usage``), or None."""
    meta = raw.get("_meta") if isinstance(raw, dict) else None
    quota = meta.get("quota") if isinstance(meta, dict) else None
    counts = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(counts, dict):
        return None
    # gemini-cli writes snake_case keys, claude-agent-acp camelCase.
    tokens = [counts.get(snake, counts.get(camel)) for snake, camel in
              (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"))]
    if not all(type(n) is int for n in tokens):
        return None
    return session_pb2.TurnUsage(input_tokens=max(0, tokens[0] or 0),
                                 output_tokens=max(0, tokens[1] or 0))


def turn_usage(result: PromptResponse, raw: Any = None) -> session_pb2.TurnUsage | None:
    """The prompt result's ``usage`` as the store records it (negative counts as 0); without
    one, the tokens of its ``_meta.quota`` (``raw``: the result as the adapter sent it)."""
    usage = result.usage
    if usage is None:
        return _quota_usage(raw)
    return session_pb2.TurnUsage(
        input_tokens=max(0, usage.input_tokens), output_tokens=max(0, usage.output_tokens),
        thought_tokens=max(0, usage.thought_tokens or 0),
        cached_read_tokens=max(0, usage.cached_read_tokens or 0),
        cached_write_tokens=max(0, usage.cached_write_tokens or 0))


@dataclass
class TurnState:
    """The reserved turn slot of a session and, once started, its accumulation."""

    acc: TurnAccumulator | None = None
    cancelled: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: The session whose session tool started this turn (sessions_spawn/sessions_send):
    #: cancelling that session cancels this turn too.
    requested_by: EdgeSession | None = None
    #: The autonomy this turn runs at most at ("" = the session's own): a turn another
    #: session started runs at most at the sender's level.
    autonomy_cap: str = ""
    #: A cancelled turn is stored (with what it streamed) unless acpgate cancelled it
    #: itself: a revoked token, a release, a delete.
    keep: bool = True
    #: The turn's id in the event log (its prompt's event id; 0 until it starts).
    turn_id: int = 0
    #: How the turn ended, as its log records it.
    end_state: str = "failed"


#: A turn's state in the event log once it ended normally.
TURN_COMPLETED = "completed"

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
    request = session_pb2.AppendTurnRequest(
        session_id=sid, items=acc.items,
        token_delta=usage.input_tokens + usage.output_tokens if usage else 0,
        holder_instance_id=holder, claim_generation=generation)
    if usage is not None:
        request.usage.CopyFrom(usage)
        rt.metrics.count_tokens(usage.input_tokens, usage.output_tokens)
    if acc.plan_json is not None:
        request.plan_json = acc.plan_json
    # The turn's events are stored before the turn: the log covers every stored turn.
    if acc.spilled and turn_id:
        request.log_turn_id = turn_id
        await _flushed(session)
    else:
        await rt.event_log.flush()
    try:
        await _append(session, request)  # the store titles the row from turn one
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.ABORTED:  # fenced: another host holds the claim now
            log.warning("turn_fenced", session_id=sid, generation=generation)
            session.lose()
            raise taken_over(sid) from None
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise JsonRpcError(STORAGE_QUOTA_EXCEEDED, exc.details() or "") from None
        log.error("append_turn_failed", session_id=sid, code=code.name)
        raise JsonRpcError(INTERNAL_ERROR,
                           f"Turn completed but could not be stored: {code.name}") from None


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


async def _append(session: EdgeSession, request: session_pb2.AppendTurnRequest) -> None:
    """``AppendTurn``, tried again while the store is unreachable, for at most
    :data:`OUTAGE_WAIT_SECS` (the turn's events wait in the event log meanwhile)."""
    deadline = asyncio.get_running_loop().time() + OUTAGE_WAIT_SECS
    pause = 0.1
    while True:
        try:
            await session.runtime.session_stub.AppendTurn(request)
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or session.taken_over \
                    or asyncio.get_running_loop().time() + pause > deadline:
                raise
            log.info("append_turn_waiting", session_id=request.session_id)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)
