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
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from acpgate.lifecycle.v1 import lifecycle_pb2
from acpgate.session.v1 import session_pb2
from services.common.policy import SecurityPolicy
from services.common.protocol import session_key_for
from services.edge.adapter_errors import setup_error
from services.edge.dispatch import DialectConnection
from services.edge.errors import grpc_error
from services.edge.params import additional_directories, encode_mcp_servers, first_str, mcp_servers
from services.edge.runtime import EdgeRuntime
from services.edge.session import EdgeSession
from services.edge.session_setup import (
    abandon,
    creating,
    ensure_lease,
    mark_active,
    reserved_slot,
    spawn_adapter,
)


def _explicit_alias(params: dict[str, Any]) -> str:
    """The first non-blank of ``agentAlias``, ``agent_alias``, ``agent`` ("" = none)."""
    for key in ("agentAlias", "agent_alias", "agent"):
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


async def open_row_and_lease(
    rt: EdgeRuntime, session_key: str, row: Awaitable[session_pb2.SessionRow],
    take_lease: Callable[[], Awaitable[lifecycle_pb2.Lease]],
) -> tuple[session_pb2.SessionRow, lifecycle_pb2.Lease]:
    """Create the row and take the lease (for ``session_key``, the row's).

    With the services in other processes the lease is taken at the same time (one
    round trip less on the critical path); with both inside this process
    (``rt.colocated``) it is taken after the row: their store threads would only
    take turns on one interpreter, which measured slower than one after the other
    (bench/PROFILE.md §14). Both steps are waited for, so none is left running.
    When the row fails, a lease already taken is closed again and the session
    service's error wins; a lease that failed alone is -32603
    (:func:`ensure_lease`) and the row is kept, as when it came first.
    """
    row_task = asyncio.ensure_future(row)
    lease_task: asyncio.Future[lifecycle_pb2.Lease] | None = None
    try:
        if rt.colocated:
            await asyncio.wait((row_task,))
        if not rt.colocated or row_task.exception() is None:
            lease_task = asyncio.ensure_future(take_lease())
        await asyncio.wait([t for t in (row_task, lease_task) if t is not None])
    except asyncio.CancelledError:
        for task in (row_task, lease_task):
            if task is not None:
                task.cancel()
        rt.spawn(_close_taken(rt, lease_task, session_key))
        raise
    exc = row_task.exception()
    if exc is not None:
        await _close_taken(rt, lease_task, session_key)
        if isinstance(exc, grpc.aio.AioRpcError):
            raise grpc_error(exc) from None
        raise exc
    assert lease_task is not None
    return row_task.result(), lease_task.result()


async def _close_taken(rt: EdgeRuntime, lease_task: asyncio.Future[lifecycle_pb2.Lease] | None,
                       session_key: str) -> None:
    """Close the lease ``lease_task`` took, if it took one (the session will not start)."""
    if lease_task is None:
        return
    with contextlib.suppress(BaseException):
        lease = await lease_task
        await rt.close_lease(lease.lease_id, session_key, "failed")


async def session_new(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """SPEC §3: alias chain, cwd rules, limit, row, adapter."""
    rt = conn.runtime
    alias = _explicit_alias(params)
    cwd = first_str(params, "cwd", "workspaceDir", "workspace_dir") or ""
    extra = additional_directories(params) or []
    try:
        # Agent, workspace and policy in one round trip (each decided as on its own).
        resolved = await rt.session_stub.ResolveNewSession(session_pb2.ResolveNewSessionRequest(
            agent=session_pb2.ResolveAgentRequest(explicit_alias=alias,
                                                  connection_default=conn.default_agent),
            cwd=cwd, base_dir=os.getcwd(), additional_directories=extra))
    except grpc.aio.AioRpcError as exc:
        raise grpc_error(exc) from None
    agent, ws = resolved.agent, resolved.workspace
    policy = SecurityPolicy.from_proto(resolved.policy)
    servers = mcp_servers(params)
    roots = list(ws.additional_directories)
    sid = str(uuid.uuid4())
    with reserved_slot(rt), creating(rt.registry, sid):
        # The row is created claimed by this host (its heartbeat renews it from now on);
        # the MCP list is stored: a later load/resume without one starts the same servers.
        # Row and lease are independent (the lease's key is the row's, SPEC §13).
        key = session_key_for(agent.alias, sid)
        row, lease = await open_row_and_lease(
            rt, key,
            rt.session_stub.CreateSession(session_pb2.CreateSessionRequest(
                session_id=sid, agent_alias=agent.alias, workspace_dir=ws.workspace_dir,
                gateway_instance_id=rt.gateway_instance_id, host=rt.claims.host,
                owner_session_key=conn.principal,
                mcp_servers_json=encode_mcp_servers(servers), additional_directories=roots)),
            lambda: ensure_lease(rt, agent, key, ws.workspace_dir))
        session = EdgeSession(rt, conn, row, rt.clock)
        client = await spawn_adapter(conn, session, agent, policy, lease)
        try:
            adapter_sid = await client.new_session(ws.workspace_dir, servers, policy, roots)
        except Exception as exc:
            await abandon(rt, session)
            raise setup_error(agent.alias, exc, client.secrets) from None
        session.state.on_setup(client.setup_result)
        await mark_active(conn, session, adapter_sid)
    return {"sessionId": sid, "workspaceDir": ws.workspace_dir, **session.state.result_fields()}
