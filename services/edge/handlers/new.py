"""SPEC §3: ``session/new`` — alias chain, cwd rules, limit, row, adapter.

ACP ``additionalDirectories`` are resolved with the cwd (the session service's
rules), stored on the row, added to the policy's roots and passed to the adapter;
the adapter's ``modes`` and ``configOptions`` are passed back to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import grpc

from acpgate.session.v1 import session_pb2
from services.edge.adapter_errors import setup_error
from services.edge.dispatch import DialectConnection
from services.edge.errors import grpc_error
from services.edge.params import additional_directories, encode_mcp_servers, first_str, mcp_servers
from services.edge.runtime import SessionRegistry
from services.edge.session import EdgeSession
from services.edge.session_setup import (
    abandon,
    mark_active,
    reserved_slot,
    session_policy,
    spawn_adapter,
)


def _explicit_alias(params: dict[str, Any]) -> str:
    """The first non-blank of ``agentAlias``, ``agent_alias``, ``agent`` ("" = none)."""
    for key in ("agentAlias", "agent_alias", "agent"):
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


@contextlib.contextmanager
def _creating(registry: SessionRegistry, sid: str) -> Iterator[None]:
    """Count ``sid`` among the sessions being set up while it is."""
    registry.creating.add(sid)
    try:
        yield
    finally:
        registry.creating.discard(sid)


async def session_new(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §3: alias chain, cwd rules, limit, row, adapter."""
    rt = conn.runtime
    alias = _explicit_alias(params)
    cwd = first_str(params, "cwd", "workspaceDir", "workspace_dir") or ""
    extra = additional_directories(params) or []
    try:
        agent = await rt.session_stub.ResolveAgent(session_pb2.ResolveAgentRequest(
            explicit_alias=alias, connection_default=conn.default_agent))
        ws = await rt.session_stub.ResolveWorkspace(session_pb2.ResolveWorkspaceRequest(
            alias=agent.alias, cwd=cwd, base_dir=os.getcwd(), additional_directories=extra))
    except grpc.aio.AioRpcError as exc:
        raise grpc_error(exc) from None
    servers = mcp_servers(params)
    roots = list(ws.additional_directories)
    sid = str(uuid.uuid4())
    with reserved_slot(rt), _creating(rt.registry, sid):
        try:
            # The row is created claimed by this host (its heartbeat renews it from now on);
            # the MCP list is stored: a later load/resume without one starts the same servers.
            # Row and policy are independent: both requests go out at once.
            row, policy = await asyncio.gather(
                rt.session_stub.CreateSession(session_pb2.CreateSessionRequest(
                    session_id=sid, agent_alias=agent.alias, workspace_dir=ws.workspace_dir,
                    gateway_instance_id=rt.gateway_instance_id, host=rt.claims.host,
                    owner_session_key=conn.principal,
                    mcp_servers_json=encode_mcp_servers(servers), additional_directories=roots)),
                session_policy(rt, agent.alias, ws.workspace_dir, roots))
        except grpc.aio.AioRpcError as exc:
            raise grpc_error(exc) from None
        session = EdgeSession(rt, conn, row, rt.clock)
        client = await spawn_adapter(conn, session, agent, policy)
        try:
            adapter_sid = await client.new_session(ws.workspace_dir, servers, policy, roots)
        except Exception as exc:
            await abandon(rt, session)
            raise setup_error(agent.alias, exc, client.secrets) from None
        session.state.on_setup(client.setup_result)
        await mark_active(conn, session, adapter_sid)
    return {"sessionId": sid, "workspaceDir": ws.workspace_dir, **session.state.result_fields()}
