"""The client's calls to its agent that name no session: ``authenticate``,
``logout``, ``providers/*`` and ``_``-prefixed extension methods without a ``sessionId``.

Each goes to the connection's default agent — the alias the client's
``session/new`` would get without one — through the connection's held adapter
(:mod:`services.edge.dialect.conn_agent`), started when there is none, and the client
gets that agent's answer whole: its result, or its error (code and message
exactly, ``data.acpgate`` saying what acpgate was doing). What succeeded of
``authenticate``, ``providers/set`` and ``providers/disable`` is kept in the
connection's memory and given to every adapter of that agent the connection
starts, and to those of its active sessions at once; ``logout`` forgets it (and
is passed to those adapters too).

The built-in agent has no authentication methods and no providers:
``authenticate`` answers ``{}`` without starting anything (what the agent itself
answers), the other methods -32601.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    INTERNAL_ERROR,
    M_AUTHENTICATE,
    M_INITIALIZE,
    M_LOGOUT,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
)
from services.edge.adapter.client import SETUP_TIMEOUT_SECS
from services.edge.adapter.failures import agent_error, exit_data, setup_error
from services.edge.adapter.link import AdapterGone
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import ResolvedAgent
from services.edge.dialect.conn_agent import REPLAYED, ConnectionAgent, HeldAdapter
from services.edge.dialect.dispatch import DialectConnection
from services.edge.errors import service_error
from services.edge.params import without_acpgate_meta

log = get_logger("edge.agent_calls")

__all__ = ["authenticate", "connection_agent", "connection_call", "default_agent"]

def connection_agent(conn: DialectConnection) -> ConnectionAgent:
    """The connection's :class:`ConnectionAgent` (made on first use)."""
    state = conn.agent_state
    if not isinstance(state, ConnectionAgent):
        state = conn.agent_state = ConnectionAgent(conn)
    return state


async def default_agent(conn: DialectConnection) -> ResolvedAgent:
    """The connection's default agent, as the session service resolves it for a
    ``session/new`` without an alias; its refusal is the client's error."""
    try:
        return await conn.runtime.session_service.resolve_agent(
            connection_default=conn.default_agent)
    except ServiceError as exc:
        raise service_error(exc) from None


async def held_adapter(conn: DialectConnection, agent: ResolvedAgent) -> HeldAdapter:
    """The connection's held adapter of ``agent``; a failed start is the client's error."""
    try:
        return await connection_agent(conn).held_for(agent)
    except (JsonRpcError, AdapterGone, ConnectionError, ServiceError) as exc:
        raise setup_error(agent.alias, exc, tuple(agent.env.values()), M_INITIALIZE) from None


async def _call(held: HeldAdapter, method: str, params: dict[str, Any]) -> Any:
    """``method`` on the held adapter; its answer whole, its error exactly."""
    try:
        return await held.link.request(method, params, SETUP_TIMEOUT_SECS)
    except JsonRpcError as exc:
        raise agent_error(exc, method, held.agent.alias) from None
    except AdapterGone as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Agent failed: {exc.exit_info.describe()}",
                           exit_data(exc.exit_info, held.client.secrets)) from None


async def _fan_out(conn: DialectConnection, alias: str, method: str,
                   params: dict[str, Any]) -> None:
    """``method`` to the adapters of the connection's active sessions of ``alias`` too (a
    direct connection's one agent process has them all); failures are logged by name."""
    adapters = [s.adapter for s in list(conn.sessions.values())
                if s.alias == alias and s.adapter is not None and not s.adapter.builtin]
    if not adapters:
        return
    answers = await asyncio.gather(*(a.link.request(method, params, SETUP_TIMEOUT_SECS)
                                     for a in adapters), return_exceptions=True)
    failed = sum(isinstance(a, BaseException) for a in answers)
    if failed:
        log.info("connection_call_not_taken", alias=alias, method=method, failed=failed)


async def authenticate(conn: DialectConnection, params: dict[str, Any]) -> Any:
    """ACP ``authenticate``: the default agent's answer (module doc)."""
    agent = await default_agent(conn)
    if agent.kind == AGENT_KIND_BUILTIN:
        return {}
    return await _agent_call(conn, agent, M_AUTHENTICATE, without_acpgate_meta(params))


async def _agent_call(conn: DialectConnection, agent: ResolvedAgent, method: str,
                      params: dict[str, Any]) -> Any:
    """A connection-level request on the held adapter; what succeeds is kept and fanned out."""
    held = await held_adapter(conn, agent)
    result = await _call(held, method, params)
    state = connection_agent(conn)
    if method in REPLAYED:
        state.record(agent.alias, method, params)
    elif method == M_LOGOUT:
        state.forget(agent.alias)
    if method in REPLAYED or method == M_LOGOUT:
        await _fan_out(conn, agent.alias, method, params)
    log.info("connection_call", alias=agent.alias, method=method)
    return result


async def connection_call(conn: DialectConnection, method: str, params: dict[str, Any],
                          notification: bool) -> Any:
    """A session-less method the relay passes to the connection's default agent (the method
    table decides which: its relayed rows, ``logout`` and ``providers/*``, and ``_``
    extension methods)."""
    agent = await default_agent(conn)
    if agent.kind == AGENT_KIND_BUILTIN:
        if notification:
            return None
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))
    sent = without_acpgate_meta(params)
    if notification:
        held = await held_adapter(conn, agent)
        held.link.notify(method, sent)
        return None
    return await _agent_call(conn, agent, method, sent)
