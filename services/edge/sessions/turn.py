"""One prompt turn of an edge session, from its reserved slot to its end (SPEC §4, §7, §8).

A session makes a :class:`Turn` per prompt (:meth:`EdgeSession.reserve_turn
<services.edge.sessions.session.EdgeSession.reserve_turn>`), with the
:class:`TurnContext` all its turns share; the turn never reaches back into the session.
:meth:`Turn.run` sends the prompt to the session's adapter (an external agent with the
client's other params as they came) while the session relays and accumulates the
streamed updates into ``Turn.acc``, and stores the turn in one ``AppendTurn``: a
completed turn, and an external agent's cancelled one with what was streamed before the
cancel (unless the cancel was acpgate's own: ``Turn.keep``); the built-in agent's
conversation holds completed turns only (SPEC §7). Every event of the turn is in the
session's event log besides. It returns a
:class:`~services.edge.sessions.prompt_result.TurnOutcome`, whoever ran the turn.

Storing (:meth:`Turn.store`) is fenced by this host's claim (SPEC §8): the turn goes to
the session service with this host's instance id and the generation of its claim on the
session (:meth:`services.edge.sessions.claims.HostClaims.fence`). The store writes it
only while that claim is still the row's, in the turn's own transaction, so a host that
was cut off past its lease — and whose session another host took over meanwhile —
cannot store a turn after the new holder's. Such a refusal (ABORTED) ends the session on
this host and answers the prompt with :func:`~services.edge.sessions.claims.taken_over`;
a turn over a storage quota (RESOURCE_EXHAUSTED) answers the quota's sentence, nothing of
it stored. A store that cannot be reached is waited for (:data:`OUTAGE_WAIT_SECS`): an
outage shorter than that delays the turn's answer instead of failing it.

:class:`~services.common.turn_items.TurnAccumulator` builds a turn's history items (the
session service builds them with it from the log for a turn that spilled);
:func:`turn_usage` is the prompt result's usage as stored with the turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from services.common.acp.schema import PromptResponse
from services.common.jsonrpc import JsonRpcError
from services.common.logs import CountedWarning, get_logger
from services.common.protocol import INTERNAL_ERROR, STOP_CANCELLED, STORAGE_QUOTA_EXCEEDED
from services.common.turn_items import TEXT_BLOCK_CHUNKS, TurnAccumulator
from services.edge.adapter.failures import prompt_error
from services.edge.adapter.link import AdapterGone
from services.edge.adapter.prompt_blocks import AdapterPrompt, carried_blocks
from services.edge.adapter.requests import read_prompt_result
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import TurnUsage
from services.edge.sessions.claims import taken_over
from services.edge.sessions.event_log import EventLog
from services.edge.sessions.feed import SessionFeed
from services.edge.sessions.history_wire import cancel_marker_update
from services.edge.sessions.prompt_result import TurnOutcome
from services.edge.sessions.session_log import SessionLog
from services.edge.sessions.session_state import AdapterSessionState

if TYPE_CHECKING:
    from services.edge.adapter.client import AdapterClient
    from services.edge.backends.session import SessionBackend
    from services.edge.metrics import Metrics
    from services.edge.sessions.claims import HostClaims

__all__ = ["CANCEL_GRACE_SECS", "TEXT_BLOCK_CHUNKS", "TURN_KEEP_CHARS", "UNASKED_CANCEL_EXIT_SECS",
           "Turn", "TurnAccumulator", "TurnContext", "turn_usage"]

log = get_logger("edge.session")

#: The most text of a running turn the edge keeps (characters); past it the turn spills
#: and the session service builds its items from the event log.
TURN_KEEP_CHARS: Final = 1 << 20


def _quota_usage(raw: Any) -> TurnUsage | None:
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
    return TurnUsage(input_tokens=max(0, tokens[0] or 0),
                     output_tokens=max(0, tokens[1] or 0))


def turn_usage(result: PromptResponse, raw: Any = None) -> TurnUsage | None:
    """The prompt result's ``usage`` as the store records it (negative counts as 0); without
    one, the tokens of its ``_meta.quota`` (``raw``: the result as the adapter sent it)."""
    usage = result.usage
    if usage is None:
        return _quota_usage(raw)
    return TurnUsage(
        input_tokens=max(0, usage.input_tokens), output_tokens=max(0, usage.output_tokens),
        thought_tokens=max(0, usage.thought_tokens or 0),
        cached_read_tokens=max(0, usage.cached_read_tokens or 0),
        cached_write_tokens=max(0, usage.cached_write_tokens or 0))


#: A turn's state in the event log once it ended normally.
TURN_COMPLETED = "completed"
#: A turn's state in the event log until it ends otherwise.
TURN_FAILED = "failed"

#: After a cancel, how long the adapter gets to answer the prompt before the edge ends it.
CANCEL_GRACE_SECS = 10.0
#: How long an adapter that ended a turn as cancelled though nobody asked is given to show
#: whether it is going away (an agent told to terminate answers its prompts so, then exits).
UNASKED_CANCEL_EXIT_SECS = 5.0
#: How long a completed turn waits for an unreachable store before it fails.
OUTAGE_WAIT_SECS: Final = 120.0


@dataclass
class TurnContext:
    """What every turn of one session runs with; the session makes it once and hands it,
    with callbacks for what only the session can do, to each :class:`Turn`."""

    session_id: str
    #: The session's numbered events (turn ids, what a replay sends live).
    feed: SessionFeed
    #: The session's writer to the event log, and the edge's event log itself.
    log: SessionLog
    event_log: EventLog
    #: The session's modes, config and title (stored with each turn).
    state: AdapterSessionState
    #: This host's claims (the fence every stored turn carries) and the store.
    claims: HostClaims
    service: SessionBackend
    metrics: Metrics
    #: Held while a turn is stored, and while a full replay reads the store: what the
    #: replay reads and the live turn's events it sends then never overlap.
    storing: asyncio.Lock
    #: Sends updates acpgate makes itself (SPEC §7's cancel marker) to the session's clients.
    publish: Callable[[list[dict[str, Any]]], Awaitable[None]]
    #: Whether another host took the session over (its turns are not this host's then).
    taken_over: Callable[[], bool]
    #: Ends the session here: the store refused a turn, another host holds its claim.
    lose: Callable[[], None]
    #: Prior conversation for an external adapter that could not restore itself: carried
    #: in the next prompt, dropped once the adapter answered one.
    pending_history: str | None = None
    #: Told of each update a turn failed to record (counted per session, across turns).
    odd: CountedWarning | None = None


class Turn:
    """One turn of a session: its slot (reserved, cancelled, done), its accumulation once it
    runs, and how it ended (module doc)."""

    def __init__(self, ctx: TurnContext, *, turn_id: int = 0) -> None:
        self._ctx = ctx
        self.acc: TurnAccumulator | None = None
        self.cancelled = False
        self.done = asyncio.Event()
        #: The session whose session tool started this turn (sessions_spawn/sessions_send):
        #: cancelling that session cancels this turn too.
        self.requested_by: object | None = None
        #: The autonomy this turn runs at most at ("" = the session's own): a turn another
        #: session started runs at most at the sender's level.
        self.autonomy_cap = ""
        #: A cancelled turn is stored (with what it streamed) unless acpgate cancelled it
        #: itself: a revoked token, a release, a delete.
        self.keep = True
        #: The turn's id in the event log (its prompt's event id; 0 until it starts).
        self.turn_id = turn_id
        #: How the turn ended, as its log records it.
        self.end_state = TURN_FAILED

    def start(self) -> None:
        """The slot is taken: the turn gets its id in the event log, running."""
        self.turn_id = self._ctx.log.turn_started()

    def end(self) -> None:
        """The slot is given back: the log records how the turn ended."""
        self._ctx.log.turn_ended(self.turn_id, self.end_state)

    async def run(self, adapter: AdapterClient, prompt: AdapterPrompt,
                  extra: dict[str, Any] | None = None) -> TurnOutcome:
        """Run this turn with ``prompt`` on ``adapter`` (module doc)."""
        ctx = self._ctx
        sid = ctx.session_id
        # With the event log on, a long turn's text is not all kept here (it spills to the log).
        keep = TURN_KEEP_CHARS if ctx.event_log.enabled else 0
        acc = self.acc = TurnAccumulator(user_text=prompt.text, keep_chars=keep, odd=ctx.odd)
        ctx.log.prompt(self.turn_id, prompt.text)
        blocks = carried_blocks(sid, ctx.pending_history, adapter.builtin or
                                adapter.agent_capabilities.prompt_capabilities.embedded_context)
        blocks.extend(prompt.blocks)
        raw: Any = {"stopReason": STOP_CANCELLED}
        if not self.cancelled:  # (else cancelled before the adapter saw it)
            try:
                raw = await self._await_prompt(adapter, blocks, extra)
            except JsonRpcError:
                if ctx.taken_over():  # the adapter went with the session: say why
                    raise taken_over(sid) from None
                raise
            if ctx.taken_over():  # whatever the adapter said: the turn is not this host's
                raise taken_over(sid)
            ctx.pending_history = None
        result = read_prompt_result(raw)
        # The built-in agent's dialect: a cancel the client asked for ends the turn cancelled
        # (SPEC §7); an external agent's own stop reason is passed on as it is.
        cancelled = result.stop_reason == STOP_CANCELLED or (self.cancelled and adapter.builtin)
        if cancelled and adapter.builtin:  # SPEC §7's marker, as the client sees it live
            await ctx.publish([cancel_marker_update(sid)])
        # The built-in agent's conversation holds completed turns only (SPEC §7); an external
        # agent's keeps a cancelled one, marked, as a direct connection would.
        stored = not cancelled or (self.keep and not adapter.builtin)
        event_log = ctx.event_log
        if stored:  # its events are stored before it: the log covers every stored turn
            await event_log.flush()
        lost = event_log.lost.get(sid)
        if lost:  # the turn streamed, but the store never got it
            raise JsonRpcError(INTERNAL_ERROR, lost)
        over_quota = event_log.quota_refusal(sid, self.turn_id)
        if over_quota:  # the turn streamed, but a storage quota refused its events
            raise JsonRpcError(STORAGE_QUOTA_EXCEEDED, over_quota)
        if stored:
            if cancelled:
                acc.mark(STOP_CANCELLED)
            await self.store(result, raw)
        self.end_state = STOP_CANCELLED if cancelled else TURN_COMPLETED
        await ctx.state.flush()  # the turn's mode/config/title changes are stored too
        ctx.metrics.turns_total += 1
        stop = STOP_CANCELLED if cancelled else result.stop_reason
        return TurnOutcome(stop, acc.text, raw if isinstance(raw, dict) else {"stopReason": stop},
                           adapter.builtin)

    async def _await_prompt(self, adapter: AdapterClient, blocks: list[dict[str, Any]],
                            extra: dict[str, Any] | None) -> Any:
        """The adapter's prompt result as it sent it; the turn ends cancelled when the adapter
        ignores a cancel for :data:`CANCEL_GRACE_SECS`."""
        task = asyncio.ensure_future(adapter.prompt(blocks, self.autonomy_cap, extra))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_SECS)
                if done:
                    raw = task.result()
                    if read_prompt_result(raw).stop_reason == STOP_CANCELLED:
                        # Its agent died (wrapper killed)?
                        gone = await adapter.link.exited(
                            0.0 if self.cancelled else UNASKED_CANCEL_EXIT_SECS)
                        if gone is not None:
                            raise AdapterGone(gone)
                    return raw
                if self.cancelled:  # the adapter ignored session/cancel: end the turn here
                    task.cancel()
                    return {"stopReason": STOP_CANCELLED}
        except (AdapterGone, JsonRpcError) as exc:
            raise prompt_error(exc, adapter.secrets, adapter.alias) from None
        finally:
            if not task.done():
                task.cancel()

    async def store(self, result: PromptResponse, raw: Any = None) -> None:
        """Store what this turn accumulated, under the session's ``storing`` lock; from then
        on the feed no longer replays it as live (:meth:`_append_turn`)."""
        assert self.acc is not None
        async with self._ctx.storing:  # a full replay reads the store, or sends it live
            await self._append_turn(self.acc, result, raw)
            self._ctx.feed.turn_stored()

    async def _append_turn(self, acc: TurnAccumulator, result: PromptResponse,
                           raw: Any = None) -> None:
        """Append the turn ``acc`` accumulated (with ``result``'s usage — or, without one, the
        tokens in ``raw``'s ``_meta.quota``: ``raw`` is the result as the adapter sent it); the
        errors of the module doc. A turn that spilled (``acc.spilled``) is sent as its user
        item and its log id: the session service builds the rest from the log."""
        ctx = self._ctx
        sid = ctx.session_id
        turn_id = self.turn_id
        usage = turn_usage(result, raw)
        holder, generation = ctx.claims.fence(sid)
        acc.close()  # relayed from now on: no longer this turn's (late_results)
        items, plan_json = acc.items, acc.plan_json
        if usage is not None:
            ctx.metrics.count_tokens(usage.input_tokens, usage.output_tokens)
        # The turn's events are stored before the turn: the log covers every stored turn.
        log_turn_id = turn_id if acc.spilled and turn_id else 0
        if log_turn_id:
            await self._flushed()
        else:
            await ctx.event_log.flush()

        def append() -> Awaitable[None]:
            return ctx.service.append_turn(
                sid, items, token_delta=usage.input_tokens + usage.output_tokens if usage else 0,
                holder_instance_id=holder, claim_generation=generation, usage=usage,
                plan_json=plan_json, log_turn_id=log_turn_id)

        try:
            await self._append(append)  # the store titles the row from turn one
        except ServiceError as exc:
            if exc.kind is Failure.CONFLICT:  # fenced: another host holds the claim now
                log.warning("turn_fenced", session_id=sid, generation=generation)
                ctx.lose()
                raise taken_over(sid) from None
            if exc.kind is Failure.EXHAUSTED:
                raise JsonRpcError(STORAGE_QUOTA_EXCEEDED, exc.detail) from None
            log.error("append_turn_failed", session_id=sid, code=exc.code)
            raise JsonRpcError(INTERNAL_ERROR,
                               f"Turn completed but could not be stored: {exc.code}") from None

    async def _flushed(self) -> None:
        """Wait until the event log holds every event handed in so far (a spilled turn's items
        are built from it), for at most :data:`OUTAGE_WAIT_SECS`."""
        ctx = self._ctx
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OUTAGE_WAIT_SECS
        while not await ctx.event_log.flush():
            if ctx.taken_over() or loop.time() > deadline:
                raise JsonRpcError(INTERNAL_ERROR, "Turn completed but could not be stored: "
                                                   "UNAVAILABLE")
            log.info("event_log_waiting", session_id=ctx.session_id)

    async def _append(self, append: Callable[[], Awaitable[None]]) -> None:
        """``AppendTurn``, tried again while the store is unreachable, for at most
        :data:`OUTAGE_WAIT_SECS` (the turn's events wait in the event log meanwhile)."""
        ctx = self._ctx
        deadline = asyncio.get_running_loop().time() + OUTAGE_WAIT_SECS
        pause = 0.1
        while True:
            try:
                await append()
                return
            except ServiceError as exc:
                if exc.kind is not Failure.UNAVAILABLE or ctx.taken_over() \
                        or asyncio.get_running_loop().time() + pause > deadline:
                    raise
                log.info("append_turn_waiting", session_id=ctx.session_id)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
