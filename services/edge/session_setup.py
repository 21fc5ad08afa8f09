"""The steps that bring a session up, shared by session/new and load/resume (SPEC §3, §8, §9).

A slot is reserved against ``max_sessions`` for the whole setup; the session's
policy comes from the session service; the adapter gets a lease, is attached
and initialized (its lease is closed again if that fails); and a session that
came up is marked active in the store — while this host still holds its claim
— and entered into the runtime and the connection, unless its adapter or its
client went away meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import grpc

from acpgate.lifecycle.v1 import lifecycle_pb2
from acpgate.session.v1 import session_pb2
from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy
from services.common.protocol import INTERNAL_ERROR, MSG_SESSION_LIMIT, SESSION_LIMIT
from services.edge.adapter import AdapterClient
from services.edge.adapter_caps import recorded_json
from services.edge.adapter_errors import exit_data, setup_error
from services.edge.claims import refusal
from services.edge.errors import start_failed
from services.edge.runtime import EdgeRuntime, SessionRegistry
from services.edge.session import ClientPort, EdgeSession

log = get_logger("edge.dialect")


class SessionHome(ClientPort, Protocol):
    """What a session is set up for and lives in: a client connection
    (``DialectConnection``), or the stand-in of a session the edge runs for another
    one (``services.edge.hosted.HostedPort``)."""

    runtime: EdgeRuntime
    #: Who the home acts as ("" = the local operator; see ``serve_connection``).
    principal: str
    #: Its active sessions, by id.
    sessions: dict[str, EdgeSession]

    @property
    def closed(self) -> bool:
        """True once the home has gone (its sessions are being released)."""

    async def send(self, line: str) -> None:
        """Write one line to the client."""


@contextmanager
def reserved_slot(runtime: EdgeRuntime) -> Iterator[None]:
    """Hold one of the ``max_sessions`` slots while a session is set up; -32001 when full."""
    if not runtime.registry.try_reserve():
        raise JsonRpcError(SESSION_LIMIT,
                           MSG_SESSION_LIMIT.format(max=runtime.cfg.acp.max_sessions))
    try:
        yield
    finally:
        runtime.registry.unreserve()


@contextmanager
def creating(registry: SessionRegistry, sid: str) -> Iterator[None]:
    """Count new session ``sid`` among those being set up while it is: its claim is
    renewed from the start (``SessionRegistry.serving``)."""
    registry.creating.add(sid)
    try:
        yield
    finally:
        registry.creating.discard(sid)


async def session_policy(runtime: EdgeRuntime, alias: str, workspace_dir: str,
                         additional_directories: Sequence[str] = (),
                         session_id: str = "") -> SecurityPolicy:
    """The policy the session service decides for ``alias`` in ``workspace_dir`` with its
    extra roots (for the stored session ``session_id``: capped by its ancestors' autonomy,
    issue 13)."""
    p = await runtime.session_stub.GetPolicy(session_pb2.GetPolicyRequest(
        alias=alias, workspace_dir=workspace_dir,
        additional_directories=list(additional_directories), session_id=session_id))
    return SecurityPolicy.from_proto(p)


async def ensure_lease(runtime: EdgeRuntime, agent: session_pb2.ResolvedAgent,
                       session_key: str, cwd: str) -> lifecycle_pb2.Lease:
    """lifecycle ``EnsureSession`` for ``session_key``: a warm adapter when the alias keeps
    some, else a fresh spawn in ``cwd``; -32603 "agent start failed" when refused."""
    try:
        resp = await runtime.lifecycle_stub.EnsureSession(lifecycle_pb2.EnsureSessionRequest(
            session_key=session_key, command=agent.command, args=list(agent.args),
            env=dict(agent.env), cwd=cwd, warm_pool=runtime.warm.pool_for(agent)))
    except grpc.aio.AioRpcError as exc:
        raise start_failed(agent.alias, exc) from None
    if not resp.warm and runtime.warm.took_cold(agent):
        runtime.spawn(runtime.warm.declare(agent))  # the lifecycle service may have forgotten it
    return resp.lease


async def spawn_adapter(conn: SessionHome, session: EdgeSession,
                        agent: session_pb2.ResolvedAgent, policy: SecurityPolicy,
                        lease: lifecycle_pb2.Lease | None = None) -> AdapterClient:
    """Ensure a lease (unless the caller took ``lease`` for the session already: see
    :func:`ensure_lease`), attach, initialize, record what the adapter can do.

    On failure the lease is closed again and the adapter's error reaches the
    client whole (:func:`services.edge.adapter_errors.setup_error`).
    """
    rt = conn.runtime
    if lease is None:
        lease = await ensure_lease(rt, agent, session.session_key, session.workspace_dir)
    session.lease_id = lease.lease_id
    client = AdapterClient(rt.lifecycle_stub, session.lease_id, session.session_id, session, agent)
    session.bind_adapter(client, conn.client_capabilities)
    try:
        await client.start(conn.client_capabilities, rt.implementation, policy)
    except Exception as exc:
        await abandon(rt, session)
        raise setup_error(agent.alias, exc, client.secrets) from None
    await _record_capabilities(rt, agent, client)
    return client


async def _record_capabilities(rt: EdgeRuntime, agent: session_pb2.ResolvedAgent,
                               client: AdapterClient) -> None:
    """Tell the session service what the alias's adapter advertised, when it changed."""
    text = recorded_json(client.agent_capabilities)
    if text == agent.adapter_capabilities_json:
        return
    try:
        await rt.session_stub.RecordAgentCapabilities(session_pb2.RecordAgentCapabilitiesRequest(
            alias=agent.alias, capabilities_json=text))
    except grpc.aio.AioRpcError as exc:  # only initialize's advertising depends on it
        log.warning("record_capabilities_failed", alias=agent.alias, code=exc.code().name)


async def abandon(runtime: EdgeRuntime, session: EdgeSession) -> None:
    """Give up a session whose setup failed: adapter closed, lease closed, row kept inactive."""
    await runtime.release(session, "failed")


async def mark_active(conn: SessionHome, session: EdgeSession, adapter_sid: str,
                      alias: str | None = None, *, mcp_servers_json: str | None = None,
                      additional_directories: Sequence[str] | None = None) -> None:
    """Store the session as active (with its new alias, MCP server list and extra roots, if
    any) and enter it everywhere.

    -32603 when the adapter died during setup, or when the connection closed
    meanwhile (the session is released then: nobody is left to use it); -32602
    "Session already active" when another host took the session over meanwhile
    (this host's claim expired: it did not renew in time).
    """
    rt = conn.runtime
    request = session_pb2.UpdateSessionRequest(
        session_id=session.session_id, state=session_pb2.SESSION_STATE_ACTIVE,
        lease_id=session.lease_id, adapter_session_id=adapter_sid,
        holder_instance_id=rt.claims.instance_id)
    if alias is not None:
        request.agent_alias = alias
    if mcp_servers_json is not None:
        request.mcp_servers_json = mcp_servers_json
    if additional_directories is not None:
        request.additional_directories.SetInParent()  # an empty list is a change too
        request.additional_directories.values.extend(additional_directories)
    try:
        await rt.session_stub.UpdateSession(request)
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.ABORTED:
            await abandon(rt, session)
            raise refusal(exc, session.session_id) from None
        log.warning("mark_active_failed", session_id=session.session_id, code=exc.code().name)
    if session.released:  # the adapter died during setup
        adapter = session.adapter
        exit_info = adapter.link.exit_info if adapter is not None else None
        raise JsonRpcError(INTERNAL_ERROR, "Agent exited during session setup",
                           exit_data(exit_info, adapter.secrets)
                           if exit_info is not None and adapter is not None else None)
    if conn.closed:  # close() already released this connection's sessions
        await conn.runtime.release(session, "disconnect")
        raise JsonRpcError(INTERNAL_ERROR, "Connection closed during session setup")
    conn.runtime.activate(session)
    conn.sessions[session.session_id] = session
    session.touch()
