"""The steps that bring a session up, shared by session/new and load/resume (SPEC §3, §8, §9).

A slot is reserved against ``max_sessions`` — and the share of the principal
the session belongs to — for the whole setup; the session's
policy comes from the session service; the adapter gets a lease, is attached
and initialized; and a session that came up is marked active in the store —
while this host still holds its claim — and entered into the runtime and the
connection, unless its adapter or its client went away meanwhile.

Everything from the session's row to that entry runs inside :func:`setting_up`:
a setup ends with the session entered, or released (adapter and lease closed,
row inactive) — whatever ended it, a cancellation at any await included — so no
lease outlives a session nobody holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from services.common.acp.v2.names import PROTOCOL_V2
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy
from services.common.protocol import INTERNAL_ERROR, PROTOCOL_VERSION
from services.edge.adapter.agent_meta import foreign
from services.edge.adapter.caps import profile_of, recorded_json
from services.edge.adapter.client import SETUP_TIMEOUT_SECS, AdapterClient
from services.edge.adapter.failures import agent_error, exit_data, setup_error
from services.edge.adapter.link import AdapterLink
from services.edge.adapter.requests import agent_secrets, initialize_request
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.lifecycle import AttachSpec
from services.edge.backends.session_types import SESSION_ACTIVE, ResolvedAgent, RowUpdate
from services.edge.caller import Caller
from services.edge.ports.client_port import ClientPort
from services.edge.sessions.claims import refusal
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.slot_reservation import Slot, creating, reserved_slot

log = get_logger("edge.dialect")

#: The slots a setup holds live in services.edge.sessions.slot_reservation; named here too, where the
#: dialect's handlers import the rest of a setup from.
__all__ = ["Slot", "creating", "reserved_slot"]


class TakenAdapter(Protocol):
    """An adapter taken for a session before the session was decided, and initialized: a
    warm one taken early (``services.edge.sessions.warm.EarlyTake``), or the connection's held
    adapter (``services.edge.dialect.conn_agent.HeldAdapter``)."""

    @property
    def agent(self) -> ResolvedAgent:
        """The agent it is an adapter of."""

    @property
    def link(self) -> AdapterLink:
        """The stream to it."""

    @property
    def answer(self) -> asyncio.Future[Any]:
        """Its ``initialize`` answer (to come)."""

    def serves(self, resolved: ResolvedAgent, initialize: dict[str, Any]) -> bool:
        """Whether a session of ``resolved`` whose policy calls for ``initialize`` may use it."""


class AgentState(Protocol):
    """What a client connection keeps of its agents (``services.edge.dialect.conn_agent``)."""

    def calls_for(self, alias: str) -> list[tuple[str, dict[str, Any]]]:
        """The calls each new adapter of ``alias`` gets after ``initialize``."""


class SessionHome(ClientPort, Protocol):
    """What a session is set up for and lives in: a client connection
    (``DialectConnection``), or the stand-in of a session the edge runs for another
    one (``services.edge.sessions.hosted_port.HostedPort``)."""

    @property
    def runtime(self) -> EdgeHub[EdgeSession]:
        """The edge's hub: its runtime as sessions see it."""

    #: Who the home acts as (services.edge.caller; see ``serve_connection``).
    caller: Caller
    #: Its active sessions, by id.
    sessions: dict[str, EdgeSession]
    #: The connection's calls to its agents (credentials...; None: none, a hosted session).
    agent_state: Any

    @property
    def closed(self) -> bool:
        """True once the home has gone (its sessions are being released)."""

    async def send(self, line: str) -> None:
        """Write one line to the client."""


@asynccontextmanager
async def setting_up(conn: SessionHome, session: EdgeSession) -> AsyncIterator[EdgeSession]:
    """The setup of ``session`` (its row exists) as one unit: when the body ends, the
    session is in the runtime's active set (:func:`mark_active` entered it), or it is
    released — adapter and lease closed, row inactive, claim dropped — whatever ended the
    body: an error, a client gone, a cancellation at any await (a connection's drain ran
    out; the session that spawned it was released). The release is a runtime task
    (``EdgeRuntime.release``): a second cancellation stops the wait, not the release."""
    reason = "failed"
    try:
        yield session
    except asyncio.CancelledError:
        reason = "setup_cancelled"
        raise
    finally:
        if conn.runtime.registry.active.get(session.session_id) is not session:
            await conn.runtime.release(session, reason)


async def session_policy(runtime: EdgeHub[EdgeSession], alias: str, workspace_dir: str,
                         additional_directories: Sequence[str] = (),
                         session_id: str = "", *, local_user: bool = False) -> SecurityPolicy:
    """The policy the session service decides for ``alias`` in ``workspace_dir`` with its
    extra roots (for the stored session ``session_id``: capped by its ancestors' autonomy),
    for the local user of ``acpgate acp`` or else a remote principal
    (the workspace rules differ)."""
    return await runtime.session_service.get_policy(
        alias, workspace_dir, additional_directories, session_id, local_user=local_user)


async def start_adapter(conn: SessionHome, session: EdgeSession,
                        agent: ResolvedAgent, policy: SecurityPolicy,
                        early: TakenAdapter | None = None) -> AdapterClient:
    """Bring the session's adapter up: its lease ensured and attached in one ``Attach``
    stream (``AttachOpen.ensure``), ``initialize`` queued right behind the open, and
    what it advertised recorded. ``early`` is a warm adapter taken and initialized while
    the session was being decided (:meth:`services.edge.sessions.warm.WarmPools.take_early`): it
    serves the session when it is what the session calls for and the pool had one, else
    it is let go (:func:`drop_early`) and the lease is ensured as usual.

    Raises what failed (a refused ensure as the lifecycle service's ServiceError), with
    ``session.lease_id`` set when a lease was ensured; the session's
    :func:`setting_up` releases it.
    """
    rt = conn.runtime
    if early is not None:
        initialize = initialize_request(conn.client_capabilities, rt.implementation,
                                        policy).to_json()
        if not early.serves(agent, initialize):
            drop_early(early)
        elif await _took(early):
            # A held adapter got the connection's calls already; a warm one none yet.
            return await _bring_up(conn, session, agent, policy, early.link, early.answer,
                                   replay=not getattr(early, "replayed", False))
    attach = AttachSpec(  # kept for a restarted edge (services.lifecycle.api.keep_on_loss)
        ensure=rt.warm.ensure_request(agent, session.session_key, session.workspace_dir),
        keep_on_loss=True)
    return await _bring_up(conn, session, agent, policy,
                           AdapterLink(rt.lifecycle, attach, foreign=foreign(agent),
                                       protocol=agent.protocol))


async def _took(early: TakenAdapter) -> bool:
    """Whether the early take got its adapter; False when it did not (the pool had none
    ready, or the adapter it took is gone: the lease is then ensured as usual). Waited for
    before a client is bound to its link, so a take that came back empty is no session's
    adapter exit."""
    try:
        await early.link.attached(SETUP_TIMEOUT_SECS)
    except Exception as exc:
        why = exc.detail if isinstance(exc, ServiceError) else str(exc)
        log.info("warm_take_failed", alias=early.agent.alias, why=why)
        return False
    return True


def drop_early(early: TakenAdapter) -> None:
    """Let go of a warm adapter taken early for a session it will not serve: its stream
    ends, and with it the lease it took (lifecycle ``AttachOpen.ensure``: closed, or back
    in its pool when the stream never reached the adapter)."""
    early.answer.cancel()
    early.link.abort()


async def _bring_up(conn: SessionHome, session: EdgeSession, agent: ResolvedAgent,
                    policy: SecurityPolicy, link: AdapterLink,
                    initialized: asyncio.Future[Any] | None = None, *,
                    replay: bool = True) -> AdapterClient:
    """Attach through ``link``, initialize (unless ``initialized`` is the answer to come of
    the initialize sent already), give it the connection's calls to this agent (its
    credentials: ``authenticate``..., unless ``replay`` is False: it got them), record the
    adapter's capabilities."""
    rt = conn.runtime
    client = AdapterClient(link, session.session_id, session, agent)
    session.bind_adapter(client, conn.client_capabilities)
    try:
        await client.start(conn.client_capabilities, rt.implementation, policy, initialized)
        state: AgentState | None = conn.agent_state
        for method, params in state.calls_for(agent.alias) if replay and state else ():
            try:
                await link.request(method, params, SETUP_TIMEOUT_SECS)
            except JsonRpcError as exc:  # the agent's refusal, exactly, saying of what
                raise agent_error(exc, method, agent.alias) from None
    finally:
        session.lease_id = link.lease_id
        ensured = link.ensured
        if ensured is not None and not ensured.warm and rt.warm.took_cold(agent):
            rt.spawn(rt.warm.declare(agent))  # the lifecycle service may have forgotten it
    await _record_capabilities(rt, agent, client)
    return client


async def spawn_adapter(conn: SessionHome, session: EdgeSession,
                        agent: ResolvedAgent, policy: SecurityPolicy,
                        early: TakenAdapter | None = None) -> AdapterClient:
    """:func:`start_adapter` for a session whose row exists (inside :func:`setting_up`,
    which releases it when this fails); the adapter's error reaches the client whole
    (:func:`services.edge.adapter.failures.setup_error`)."""
    try:
        return await start_adapter(conn, session, agent, policy, early)
    except Exception as exc:
        raise setup_error(agent.alias, exc, agent_secrets(agent), "initialize") from None


async def _record_capabilities(rt: EdgeHub[EdgeSession], agent: ResolvedAgent,
                               client: AdapterClient) -> None:
    """Tell the session service what the alias's adapter advertised (its profile), when it
    changed."""
    text = recorded_json(profile_of(client.initialize_result))
    if text == agent.adapter_capabilities_json:
        return
    try:
        await rt.session_service.record_agent_capabilities(agent.alias, text)
    except ServiceError as exc:  # only initialize's advertising depends on it
        log.warning("record_capabilities_failed", alias=agent.alias, code=exc.code)


def _spoken_version(session: EdgeSession) -> int:
    """The ACP version the session's agent speaks, as its ``initialize`` chose it: recorded
    on the row, so an edge re-adopting the session translates by it whatever the alias says
    by then (:mod:`services.edge.sessions.readopt`)."""
    adapter = session.adapter
    return PROTOCOL_V2 if adapter is not None and adapter.link.speaks_v2 else PROTOCOL_VERSION


async def mark_active(conn: SessionHome, session: EdgeSession, adapter_sid: str,
                      alias: str | None = None, *, mcp_servers_json: str | None = None,
                      additional_directories: Sequence[str] | None = None) -> None:
    """Store the session as active (with its new alias, MCP server list and extra roots, if
    any) and enter it everywhere; the last step of :func:`setting_up`'s body.

    -32603 when the adapter died during setup, or when the connection closed
    meanwhile (the session is released then: nobody is left to use it); -32602
    "Session already active" when another host took the session over meanwhile
    (this host's claim expired: it did not renew in time).

    A session whose setup took its claim (``session.claimed_at``: session/new) less
    than a heartbeat ago holds it for certain, so nothing can refuse the write: when
    it only records the adapter (no alias, servers or roots to change), the session
    is entered at once and the row written meanwhile (one round trip less before
    the answer; its release waits for the write, ``EdgeSession.row_write``).
    """
    rt = conn.runtime
    holder, generation = rt.claims.fence(session.session_id)
    request = RowUpdate(
        session.session_id, holder_instance_id=holder, claim_generation=generation,
        state=SESSION_ACTIVE, lease_id=session.lease_id, adapter_session_id=adapter_sid,
        protocol_version=_spoken_version(session), agent_alias=alias, mcp_servers_json=mcp_servers_json,
        additional_directories=additional_directories)
    only_adapter = alias is None and mcp_servers_json is None and additional_directories is None
    if only_adapter and session.claimed_at is not None \
            and rt.claims.certainly_held(session.claimed_at, rt.clock()):
        session.row_write = asyncio.ensure_future(_write_active_later(rt, session, request))
    else:
        try:
            await _write_active(rt, request)
        except ServiceError as exc:  # a conflict: the claim is another host's
            raise refusal(exc, session.session_id) from None
    if session.released:  # the adapter died during setup
        adapter = session.adapter
        exit_info = adapter.link.exit_info if adapter is not None else None
        raise JsonRpcError(INTERNAL_ERROR, "Agent exited during session setup",
                           exit_data(exit_info, adapter.secrets)
                           if exit_info is not None and adapter is not None else None)
    if conn.closed:  # close() is releasing this connection's sessions (or has)
        await conn.runtime.release(session, "disconnect")
        raise JsonRpcError(INTERNAL_ERROR, "Connection closed during session setup")
    conn.runtime.activate(session)
    conn.sessions[session.session_id] = session
    session.touch()


async def _write_active(rt: EdgeHub[EdgeSession], request: RowUpdate) -> None:
    """``UpdateSession`` of :func:`mark_active`: a conflict (another host's claim) raises, any
    other failure is logged (the session runs; only a later restore reads the row)."""
    try:
        await rt.session_service.update_session(request)
    except ServiceError as exc:
        if exc.kind is Failure.CONFLICT:
            raise
        log.warning("mark_active_failed", session_id=request.session_id, code=exc.code)


async def _write_active_later(rt: EdgeHub[EdgeSession], session: EdgeSession,
                              request: RowUpdate) -> None:
    """:func:`_write_active` after the answer; a claim lost after all ends the session as
    the heartbeat would (in a task of its own: its release waits for this write)."""
    try:
        await _write_active(rt, request)
    except ServiceError:
        log.warning("session_claim_lost", session_id=session.session_id)
        session.lose()
