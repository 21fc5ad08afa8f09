"""SPEC §3: ``session/new`` — alias chain, cwd rules, limit, row, adapter.

The client's ``mcpServers`` are checked first (:mod:`services.edge.dialect.mcp_admission`:
a gateway client's are bound by ``[gateway] client_mcp_servers``); a refused
entry answers -32602 before anything is created.

ACP ``additionalDirectories`` are resolved with the cwd (the session service's
rules), stored on the row, added to the policy's roots and passed to the adapter;
the adapter's result comes back whole (:func:`services.edge.sessions.prompt_result.setup_result`),
and an external adapter gets the client's params acpgate does not read itself
(``systemPrompt``, ``_meta``, fields of later ACP versions) as they came.

The connection's held adapter (:mod:`services.edge.dialect.conn_agent`: one started for an
``authenticate`` or ``initialize`` before any session) serves the session when it
is what the session calls for; it takes the place of the warm take.

A warm ``session/new`` is two steps going at once, then the adapter's own two
(docs/contracts.md "A warm session/new's round trips"): the session service
decides agent, workspace and policy and writes the row claimed by this host
(one ``ResolveNewSession``), while a warm adapter of the likely alias is taken
(:meth:`services.edge.sessions.warm.WarmPools.take_early`); then ``initialize`` and the
adapter's ``session/new``. The row's "active" write goes on after the answer
(:func:`services.edge.sessions.session_setup.mark_active`).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable
from typing import Any

from services.common.jsonrpc import Answered, JsonRpcError
from services.common.policy import SecurityPolicy
from services.edge.adapter.failures import setup_error
from services.edge.adapter.requests import expected_initialize
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import NewSession, ResolvedAgent
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.agent_calls import connection_agent
from services.edge.dialect.handlers.param_checks import check_new
from services.edge.dialect.mcp_admission import admitted_servers, client_mcp_rules
from services.edge.errors import service_error
from services.edge.params import (
    additional_directories,
    client_cwd,
    encode_mcp_servers,
    mcp_servers,
    passed_params,
)
from services.edge.sessions.prompt_result import setup_result
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.session_setup import (
    TakenAdapter,
    creating,
    drop_early,
    mark_active,
    reserved_slot,
    setting_up,
    spawn_adapter,
)

#: The params of session/new acpgate reads itself (the rest passes to an external agent).
_OWN_NEW_KEYS = frozenset({"agentAlias", "agent_alias", "agent", "cwd", "workspaceDir",
                           "workspace_dir", "mcpServers", "additionalDirectories"})


def _explicit_alias(params: dict[str, Any]) -> str:
    """The first non-blank of ``agentAlias``, ``agent_alias``, ``agent`` ("" = none)."""
    for key in ("agentAlias", "agent_alias", "agent"):
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def decision(conn: DialectConnection, sid: str, alias: str, cwd: str, extra: list[str],
             servers: list[Any]) -> asyncio.Future[NewSession]:
    """The session service's decision for new session ``sid`` — agent, workspace, policy —
    and its row, created claimed by this host: one ``ResolveNewSession``, sent now (cancel
    the future to give it up)."""
    rt = conn.runtime
    call = asyncio.ensure_future(rt.session_service.resolve_new_session(
        sid, explicit_alias=alias, connection_default=conn.default_agent,
        cwd=cwd, base_dir=os.getcwd(), additional_directories=extra,
        # The local user of acpgate acp may work in a directory holding acpgate's state;
        # a gateway client, with or without auth, is not the OS user.
        local_user=not conn.remote,
        gateway_instance_id=rt.gateway_instance_id, host=rt.claims.host,
        public_url=rt.claims.public_url, owner_session_key=conn.caller.owner_key,
        # The MCP list is stored: a later load/resume without one starts the same servers.
        mcp_servers_json=encode_mcp_servers(servers)))
    call.add_done_callback(_retrieved)
    return call


def _retrieved(call: asyncio.Future[NewSession]) -> None:
    """A decision given up after it failed is not an unretrieved error (its caller's
    failure is what is reported)."""
    if not call.cancelled():
        call.exception()


async def decided(conn: DialectConnection,
                  call: Awaitable[NewSession], taken_at: float,
                  ) -> tuple[EdgeSession, ResolvedAgent, SecurityPolicy]:
    """The session as the edge holds it once ``call`` (:func:`decision`, sent at
    ``taken_at`` on the runtime's clock) answered; refusals are the client's errors."""
    rt = conn.runtime
    try:
        resolved = await call
    except ServiceError as exc:
        raise service_error(exc) from None
    rt.claims.held(resolved.row)  # the generation its writes are fenced by
    session = EdgeSession(rt, conn, resolved.row, rt.clock)
    session.claimed_at = taken_at  # the claim is at least as fresh as the request
    return session, resolved.agent, resolved.policy


async def session_new(conn: DialectConnection, params: dict[str, Any]) -> Answered:
    """SPEC §3: alias chain, cwd rules, limit, row, adapter."""
    rt = conn.runtime
    alias = _explicit_alias(params)
    cwd = client_cwd(params, remote=conn.remote)
    extra = additional_directories(params) or []
    # Before anything is created: a refused MCP server leaves no row and no adapter.
    client_mcp = client_mcp_rules(conn)
    servers = await admitted_servers(client_mcp, mcp_servers(params))
    held = connection_agent(conn).take(alias) if conn.agent_state is not None else None
    # A held adapter's lease is keyed by the id of the session that takes it.
    sid = held.session_id if held is not None else str(uuid.uuid4())
    async with reserved_slot(rt, conn.caller.principal, explain=conn.remote,
                             validate=lambda: check_new(conn, alias, cwd, extra)), \
            creating(rt.registry, sid):
        # The decision is the longer of the two: its call goes out first (the loop turn
        # lets it leave before the take is even built).
        taken_at = rt.clock()
        call = decision(conn, sid, alias, cwd, extra, servers)
        early: TakenAdapter | None = held
        try:
            await asyncio.sleep(0)
            if early is None:
                early = rt.warm.take_early(
                    alias or conn.default_agent or rt.cfg.acp.default_agent, sid,
                    lambda autonomy: expected_initialize(conn.client_capabilities,
                                                         rt.implementation, autonomy))
            session, agent, policy = await decided(conn, call, taken_at)
        except BaseException as exc:
            call.cancel()  # still going only when given up before its answer
            if early is not None:
                drop_early(early)
            if not isinstance(exc, JsonRpcError):  # given up half-way: the row may exist
                rt.spawn(rt.claims.release(sid))  # (it stays, inactive, as after any failure)
            raise
        async with setting_up(conn, session):
            session.clients.hold()  # its updates follow the answer that names it
            client = await spawn_adapter(conn, session, agent, policy, early)
            roots = session.additional_directories
            try:
                adapter_sid = await client.new_session(
                    session.workspace_dir, servers, policy, roots, client_mcp,
                    passed_params(params, _OWN_NEW_KEYS))
            except Exception as exc:
                raise setup_error(agent.alias, exc, client.secrets) from None
            session.state.on_setup(client.setup_result)
            await mark_active(conn, session, adapter_sid)
    return Answered(setup_result(client.setup_result, session.state.result_fields(),
                                 builtin=client.builtin, session_id=sid,
                                 workspace_dir=session.workspace_dir),
                    session.clients.release_held)
