"""One active edge session: its adapter, its running turn, its relays (SPEC §4–§7).

The dialect decides *whether* a request may run; an :class:`EdgeSession` runs
it: streams the adapter's updates to its clients in order, accumulates them into
the running :class:`~services.edge.sessions.turn.Turn` (which runs, stores and logs
itself) — what finishes while no turn accumulates is stored on its own
(:mod:`.late_results`) — relays permission requests with ``zc-out-N`` ids and applies
cancel.

Agent-to-agent sessions: a session knows its stored key and its
parent's; the adapter's extension requests (the session tools) go to the
runtime's table of adapter methods; cancelling a session also cancels the
running turns of its children and the turns it asked other sessions for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Final

from services.common.acp.schema import ClientCapabilities
from services.common.jsonrpc import JsonRpcError, JsonRpcId, notification_lines, serving_id
from services.common.logs import CountedWarning, get_logger
from services.common.principals import principal_of_owner
from services.common.protocol import (
    ACPGATE_METHOD_PREFIX,
    CANCEL_REASON_TIMEOUT,
    INTERNAL_ERROR,
    M_ELICITATION_COMPLETE,
    M_ELICITATION_CREATE,
    M_SESSION_UPDATE,
    session_key_for,
)
from services.common.turn_items import ACCUMULATE_FAILED
from services.edge.adapter.client import AdapterClient
from services.edge.adapter.client_methods import ClientMethods, ask_client
from services.edge.adapter.exits import method_not_found
from services.edge.adapter.link import AdapterExit
from services.edge.adapter.prompt_blocks import AdapterPrompt
from services.edge.adapter.relay_lines import RelayedUpdate
from services.edge.backends.session_types import SessionRow
from services.edge.ports.backchannel import BackChannelError
from services.edge.ports.client_port import ClientPort
from services.edge.ports.permission import cancelled_answer, denial_reason, relayed_answer
from services.edge.sessions.clients import FollowingBackChannel, SessionClients
from services.edge.sessions.feed import SessionFeed
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.late_results import late_items, store_late
from services.edge.sessions.prompt_result import TurnOutcome
from services.edge.sessions.session_log import (
    KIND_CANCEL,
    KIND_PERMISSION,
    LOGGED_QUESTIONS,
    SessionLog,
)
from services.edge.sessions.session_state import STATE_UPDATES, AdapterSessionState
from services.edge.sessions.subagents import SessionWork, bound_children, store_child
from services.edge.sessions.turn import Turn, TurnContext

log = get_logger("edge.session")

#: How long an answer waits for the event log before the wait is logged (and goes on).
_ANSWER_STORED_SECS: Final = 5.0



#: An adapter→client request the edge serves itself (the session tools' extension
#: methods): the session it came from and its params → the result.
AdapterMethod = Callable[["EdgeSession", dict[str, Any]], Awaitable[Any]]


class EdgeSession:
    """An active session bound to one client connection and one adapter lease."""

    def __init__(
        self,
        runtime: EdgeHub[EdgeSession],
        port: ClientPort,
        row: SessionRow,
        clock: Callable[[], float],
    ) -> None:
        self.runtime = runtime
        #: The client connection serving the session now (a ``DetachedPort`` while none
        #: does: services.edge.sessions.clients).
        self.port = port
        #: Set while a client connection is attached (cleared while detached).
        self.attached = asyncio.Event()
        self.attached.set()
        #: Set (and replaced) whenever the session moves to another port.
        self.port_moved = asyncio.Event()
        #: Requests to the human, following the session across a detach and reattach.
        self.asking = FollowingBackChannel(self)
        #: Every relayed update numbered, the newest kept for replay.
        gateway = runtime.cfg.gateway
        self.feed = SessionFeed(row.session_id, max_chars=gateway.replay_chars,
                                budget=runtime.ring_budget,
                                principal=principal_of_owner(row.ownership.owner_session_key))
        #: The client connections attached besides ``port`` (session/attach).
        self.clients = SessionClients(self)
        #: Held while a turn is stored, and while a full replay reads the store: what the
        #: replay reads and the live turn's events it sends then never overlap.
        self.storing = asyncio.Lock()
        #: What the session hands its event log besides the relayed updates.
        self.log = SessionLog(runtime.event_log, row.session_id, self.feed,
                              lambda: self.turn.turn_id if self.turn is not None else 0)
        #: The client has used the session after its setup answer (a later request named
        #: it): only such a session is detached when its connection goes, so a client cannot
        #: park agents by disconnecting mid-setup.
        self.confirmed = False
        self.session_id = row.session_id
        self.alias = row.agent_alias
        self.workspace_dir = row.workspace_dir
        #: ACP additionalDirectories: the session's extra roots (real paths).
        self.additional_directories = list(row.additional_directories)
        self.session_key = (row.ownership.session_key
                            or session_key_for(row.agent_alias, row.session_id))
        #: The key the store knows this session by: the requester of its session tools.
        self.store_key = self.session_key
        #: The session that spawned this one ("" for a top-level session).
        self.parent_key = row.ownership.parent_session_key
        #: The principal the session belongs to: its row owner's.
        self.principal: str = principal_of_owner(row.ownership.owner_session_key)
        self.owner_key = row.ownership.owner_session_key
        #: A v2 agent's child sessions and background work (:mod:`.subagents`).
        self.work = SessionWork()
        #: Where the sessions the edge runs for this one live (made on first use:
        #: services.edge.sessions.hosted_port).
        self.hosted: ClientPort | None = None
        self.lease_id = ""
        self.adapter: AdapterClient | None = None
        self._client_methods: ClientMethods | None = None
        self.turn: Turn | None = None
        self._clock = clock
        self.last_activity = clock()
        self.released = False
        #: The release that ``released`` announced, running in a runtime task
        #: (``EdgeRuntime.release``: never stopped half-way by a cancelled caller).
        self.releasing: asyncio.Task[None] | None = None
        #: When this setup took the row's claim (runtime clock): session/new creates it claimed.
        self.claimed_at: float | None = None
        #: The generation of this host's claim while this session object serves (set when
        #: it becomes active): its release drops that claim, never a newer one of a later
        #: restore of the same session.
        self.claim_generation = 0
        #: The row's "active" write while it goes on after the answer (``mark_active``).
        self.row_write: asyncio.Future[None] | None = None
        #: Another host took the session over (this host's claim was lost): the running
        #: turn answers so and is not stored; the session ends here.
        self.taken_over = False
        self._relays: set[asyncio.Future[Any]] = set()
        #: What finished between turns, being stored (:mod:`.late_results`).
        self._late: set[asyncio.Task[None]] = set()
        #: Modes, config options and title as the adapter reported them (relayed, stored).
        claims, sid = runtime.claims, row.session_id
        self.state = AdapterSessionState(runtime.session_service, sid, runtime.spawn,
                                         fence=lambda: claims.fence(sid))
        #: The agent's updates that failed to record (an odd shape, nested too deep): a
        #: hostile agent sends them at will, so they are counted, not each logged.
        self.odd_updates = CountedWarning(log, ACCUMULATE_FAILED, session_id=sid)
        #: What every turn of this session runs with (services.edge.sessions.turn).
        self.turn_context = TurnContext(
            sid, self.feed, self.log, runtime.event_log, self.state, claims,
            runtime.session_service, runtime.metrics, self.storing,
            publish=self.publish_own, taken_over=lambda: self.taken_over, lose=self.lose,
            odd=self.odd_updates)

    @property
    def pending_history(self) -> str | None:
        """Prior conversation for an external adapter that could not restore itself: the
        next prompt carries it."""
        return self.turn_context.pending_history

    @pending_history.setter
    def pending_history(self, text: str | None) -> None:
        self.turn_context.pending_history = text

    # ------------------------------------------------------------------ activity

    def touch(self) -> None:
        """Mark activity now (idle reaper)."""
        self.last_activity = self._clock()

    def now(self) -> float:
        """The runtime's clock."""
        return self._clock()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a background task of the runtime (kept referenced, awaited on
        close)."""
        return self.runtime.spawn(coro)

    async def deactivate(self, reason: str) -> None:
        """Remove this session from the runtime and release its adapter (the stored record
        stays)."""
        await self.runtime.deactivate(self, reason)

    def idle_for(self) -> float:
        """Seconds since the last activity."""
        return self._clock() - self.last_activity

    def bind_adapter(self, adapter: AdapterClient, client_caps: ClientCapabilities) -> None:
        """Serve ``adapter``, whose fs/terminal requests go by ``client_caps`` (the client's)."""
        self.adapter = adapter
        bound_children(self.session_id, adapter, self.runtime.cfg.acp.max_subagents_per_session)
        self._client_methods = ClientMethods(
            self.runtime.session_service, self.session_id, self.asking, client_caps,
            float(self.runtime.cfg.acp.session_timeout_secs))

    # ------------------------------------------------------------------ AdapterHost

    async def on_adapter_update(self, params: dict[str, Any]) -> None:
        """Forward one update to the client at once and accumulate it."""
        await self.on_adapter_updates([params])

    async def on_adapter_updates(self, updates: list[dict[str, Any]]) -> None:
        """Forward adapter updates to the clients at once, in order, and accumulate them.

        A burst that arrived together goes out under one send (one lock hold, one
        write for the lot) instead of one send per update.
        """
        objects = [update for params in updates
                   if type(update := params.get("update")) is dict]
        odd = [params for params in updates if type(params.get("update")) is not dict]
        for announced in self.work.observe(objects):
            self.runtime.spawn(store_child(self.runtime.session_service, self, announced))
        await self._relay(objects, None, notification_lines(M_SESSION_UPDATE, odd))

    async def on_adapter_update_lines(self, updates: Sequence[RelayedUpdate],
                                      lines: list[str]) -> None:
        """Accumulate ``updates`` (the ``update`` objects, or a text chunk's text) and send
        them (``lines``: those messages as the relay wrote them) at once, in order, under
        one send."""
        await self._relay(updates, lines, [])

    async def _relay(self, updates: Sequence[RelayedUpdate], lines: list[str] | None,
                     odd: list[str]) -> None:
        self.touch()
        turn = self.turn
        acc = turn.acc if turn is not None else None
        if acc is not None and not (acc.closed and not acc.spilled):
            others = acc.add_many(updates)
        else:  # no turn accumulates: what finishes now is stored on its own
            others = [update for update in updates if type(update) is dict]
            if late := late_items(others, self.odd_updates):
                task = self.runtime.spawn(store_late(self.turn_context, late))
                self._late.add(task)
                task.add_done_callback(self._late.discard)
        for update in others:
            try:
                if update.get("sessionUpdate") in STATE_UPDATES:  # mode, config, title
                    self.state.on_update(update)
            except Exception as exc:  # never lose the relay over an odd update
                self.odd_updates(error=type(exc).__name__, kind="state")
        events = self.feed.stamp(updates, lines)
        self.runtime.event_log.updates(self.session_id, turn.turn_id if turn else 0, events)
        self.runtime.metrics.relayed_updates_total += len(events) + len(odd)
        await self.clients.publish(events, odd)

    async def publish_own(self, updates: list[dict[str, Any]], *,
                          not_for: object | None = None) -> None:
        """Send updates acpgate itself makes (``turn_complete``, ``prompt_received``, SPEC
        §7's marker...) to every client but ``not_for``, numbered like the agent's."""
        events = self.feed.stamp(updates, None, not_for)
        if not_for is None:  # an echo to the others (of a prompt, a turn's end) is not logged
            turn = self.turn
            self.runtime.event_log.updates(self.session_id, turn.turn_id if turn else 0, events)
        await self.clients.publish(events)

    async def serve_adapter_request(self, method: str, params: dict[str, Any]) -> Any:
        """An adapter request the edge answers itself (the session tools); any other is
        passed to the client (``sessionId``, if any, is this session's already),
        its answer back whole — never acpgate's own ``_acpgate/*`` methods, nor from a
        hosted session (-32601)."""
        handler = self.adapter_methods.get(method)
        self.touch()
        if handler is not None:
            return await handler(self, params)
        if method.startswith(ACPGATE_METHOD_PREFIX) or not self.port.passes_unknown:
            raise method_not_found(method)
        return await ask_client(self.asking, method, params,
                                float(self.runtime.cfg.acp.session_timeout_secs))

    @property
    def adapter_methods(self) -> Mapping[str, AdapterMethod]:
        """The runtime's table of adapter methods."""
        return self.runtime.adapter_methods

    async def relay_to_client(self, method: str, params: dict[str, Any], *,
                              request_id: JsonRpcId | None = None) -> Any:
        """Re-issue an adapter request to the client; fall back to a denial on any failure.

        ``request_id``: the adapter's id of the request (by default the one being served
        in this task). A permission request or an elicitation is logged with it before it
        is relayed, and its answer after, so an edge that re-adopts the session asks again
        what is open (:mod:`services.edge.sessions.open_questions`). The answer is stored
        before it is returned (:meth:`_answer_stored`): the agent never gets an answer the
        log lacks, so a request it has its answer to is never asked again."""
        self.touch()
        self.runtime.metrics.permission_requests_total += 1
        rid = request_id if request_id is not None else serving_id()
        if method in LOGGED_QUESTIONS and rid is not None and request_id is None:
            self.log.action(KIND_PERMISSION,
                            {"method": method, "requestId": rid, "params": params})
        fallback: dict[str, Any] = (
            {"action": "cancel"} if method == M_ELICITATION_CREATE
            else cancelled_answer()
        )
        timeout_secs = self.runtime.cfg.acp.session_timeout_secs
        waiter = asyncio.ensure_future(self.asking.request(
            method, params, float(timeout_secs)))
        self._relays.add(waiter)
        try:
            result = await waiter
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                if request_id is None and rid is not None:  # the peer answers it an error
                    self._log_answer(method, rid, None)
                    if method in LOGGED_QUESTIONS:
                        await self._answer_stored()
                raise
            answer = fallback  # the turn was cancelled while the question was open
        except BackChannelError as exc:
            log.info("relay_denied", session_id=self.session_id, method=method, why=str(exc))
            if method == M_ELICITATION_CREATE:
                answer = fallback
            else:
                # Tell the adapter why, so it does not blame the user (docs/contracts.md).
                reason = denial_reason(exc)
                waited = timeout_secs if reason == CANCEL_REASON_TIMEOUT else None
                answer = cancelled_answer(reason, timeout_secs=waited)
        else:
            # What the agent gets is what is logged: never the client's own bytes, which may
            # say more than (or the opposite of) what was relayed.
            answer = (result if isinstance(result, dict) else fallback) \
                if method == M_ELICITATION_CREATE else relayed_answer(result)
        finally:
            self._relays.discard(waiter)
            self.touch()
        self._log_answer(method, rid, answer)
        if method in LOGGED_QUESTIONS:
            await self._answer_stored()
        return answer

    async def _answer_stored(self) -> None:
        """Wait until the answer just logged is stored, before the agent gets it: were this
        process to die with the answer written to the agent but not stored, the edge that
        re-adopts the session would ask again and the agent get a second answer to the id.
        A store that does not answer holds the answer back (it is retried), unless the
        session ends meanwhile. An answer is rare: the commit it waits for (sent at once)
        costs no relay anything."""
        while not await self.log.settled(_ANSWER_STORED_SECS):
            if self.released:
                return
            log.warning("answer_waits_for_log", session_id=self.session_id)

    def _log_answer(self, method: str, rid: JsonRpcId | None, answer: Any) -> None:
        """The answer the agent got to its request ``rid`` (None: an error answer, the
        request withdrawn or its link gone), logged."""
        logged: dict[str, Any] = {"method": method, "answer": answer}
        if rid is not None:
            logged["requestId"] = rid
        self.log.action(KIND_PERMISSION, logged)

    async def client_method(self, method: str, params: dict[str, Any]) -> Any:
        """An adapter's fs/terminal request (decided by the session service first)."""
        self.touch()
        if self._client_methods is None:
            raise JsonRpcError(INTERNAL_ERROR, "Agent is not running")
        try:
            return await self._client_methods.handle(method, params)
        finally:
            self.touch()

    async def notify_client(self, method: str, params: dict[str, Any]) -> None:
        """Pass an adapter notification on to the client (``elicitation/complete``, and any
        other whose method acpgate does not know, unless this is a hosted session)."""
        if method != M_ELICITATION_COMPLETE and not self.port.passes_unknown:
            return
        self.touch()
        try:
            await self.port.notify(method, params)
        except (ConnectionError, OSError):
            log.info("client_gone_during_notification", session_id=self.session_id)

    def on_adapter_exit(self, exit_info: AdapterExit) -> None:
        """An adapter that dies leaves the session inactive but loadable."""
        if not self.released:
            log.info("adapter_exited", session_id=self.session_id, cause=exit_info.describe())
            self.runtime.spawn(self.runtime.deactivate(self, "exit"))

    # ------------------------------------------------------------------ turns

    def reserve_turn(self) -> Turn | None:
        """Take the turn slot; None when a turn already runs (SPEC §4 -32002)."""
        if self.turn is not None:
            return None
        self.turn = Turn(self.turn_context)
        self.turn.start()
        self.feed.turn_started()
        self.touch()
        return self.turn

    def release_turn(self, turn: Turn) -> None:
        """Free the turn slot."""
        if self.turn is turn:
            turn.end()
            self.turn = None
            self.feed.turn_stored()  # stored, or never to be: not replayed as live any more
        turn.done.set()
        self.touch()

    async def run_turn(self, turn: Turn, prompt: AdapterPrompt,
                       extra: dict[str, Any] | None = None) -> TurnOutcome:
        """Send the prompt (with ``extra``: the client's other params, for an external
        agent) to this session's adapter, stream, store the turn; return how it ended
        (:meth:`services.edge.sessions.turn.Turn.run`)."""
        adapter = self.adapter
        if adapter is None:
            raise JsonRpcError(INTERNAL_ERROR, "Agent is not running")
        return await turn.run(adapter, prompt, extra)

    def lose(self) -> None:
        """Another host took this session over: end it here (its adapter closed, its lease
        reaped; the release is fenced, so the other host's claim stays untouched) and make a
        running turn answer :func:`~services.edge.sessions.claims.taken_over`."""
        if self.taken_over:
            return
        self.taken_over = True
        self.runtime.spawn(self.runtime.deactivate(self, "claim_lost"))

    def cancel(self, *, keep: bool = True, asked_by: str = "") -> bool:
        """Interrupt the running turn (SPEC §7), and the running turns of this session's
        children and of the turns it asked other sessions for (they stay
        open). False when this session itself runs no turn.

        ``keep``: the turns are stored with what they streamed (a client's cancel);
        False for acpgate's own cancels (a revoked token, a release, a delete), whose
        turns are never stored. ``asked_by``: the method a client asked it with — logged as
        the client's action when a turn of this session was cancelled ("": acpgate's own)."""
        mine = self._cancel_tree({self}, keep)
        if mine and asked_by:
            self.log.action(KIND_CANCEL, {"method": asked_by})
        return mine

    def _cancel_tree(self, seen: set[EdgeSession], keep: bool) -> bool:
        turn = self.turn
        mine = turn is not None and not turn.cancelled
        if turn is not None and not keep:
            turn.keep = False
        if turn is not None and mine:
            turn.cancelled = True
            if turn.acc is not None and self.adapter is not None:
                self.adapter.cancel()
            for waiter in list(self._relays):
                waiter.cancel()
        for other in list(self.runtime.registry.active.values()):
            if other in seen:
                continue
            theirs = other.turn
            if (self.store_key and other.parent_key == self.store_key) or (
                    theirs is not None and theirs.requested_by is self):
                seen.add(other)
                other._cancel_tree(seen, keep)
        return mine

    async def history_settled(self) -> None:
        """Return once what finished between turns and was relayed so far is stored (a
        reader of the stored history — a fork, the session tools — sees what the clients
        saw)."""
        if self._late:
            await asyncio.wait(set(self._late))

    async def wait_turn(self) -> None:
        """Wait until no turn runs."""
        while self.turn is not None:
            await self.turn.done.wait()


