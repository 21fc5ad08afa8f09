"""ACP ``session/fork``: a new session with a stored session's history, any agent.

:func:`session_fork` runs the steps in order: reserve a slot → read the parent
row, if this connection may act on it (another principal's session is "not
found", exactly like a missing one) and count the slot against the parent's
principal, whose session the fork is → check the MCP servers the fork would
start (the request's ``mcpServers``, else the parent's stored list;
:mod:`services.edge.dialect.mcp_admission`) → ``ForkSession``: the session service
decides the agent (the one a restore of the parent would run), the workspace
(the parent's; a ``cwd`` naming another is refused) and the policy, and writes
the fork's row with a copy of the parent's history in one transaction, claimed
by this host (over the token's storage quota: -32004, nothing written) → a
fresh adapter for the fork, under its own lease → seed it → set the parent's
stored mode and config values again → mark the fork active. The result is
the agent's own, whole (an external agent's fork or fresh session
result, ``modes``, ``configOptions``, ``models``, ``_meta`` …; the built-in
agent's state fields), with the fork's ``sessionId`` and
``_meta.acpgate.forkedFrom`` (:func:`services.edge.sessions.prompt_result.fork_result`).
The client's params acpgate does not read reach an external agent's
``session/fork`` or ``session/new`` as they came; an agent's error is passed
on exactly, acpgate's context in ``data.acpgate``.

**Seeding.** The built-in agent is resumed under the fork's own id with the
fork's (copied) history following in chunks, as a restore seeds it. An external
agent is asked for its own ``session/fork`` of the parent's agent session when
it can be: the same agent, an agent session id stored for the parent, a parent
no other live host serves (whose agent would know a later conversation than
this host's), and a fresh adapter that advertises ``sessionCapabilities.fork``
— claude-agent-acp keeps its sessions on disk, so its new process forks the
parent natively. Otherwise, or when the adapter refuses, the fork is acpgate's
own: a fresh adapter session, the transcript carried over with the first prompt.

**Never inside the parent's adapter.** ACP's fork creates the new session in
the agent process that holds the parent. acpgate runs one adapter process per
session under one lease (ARCHITECTURE rule 1): a second session in the
parent's process would have no lease of its own, would die when the parent is
closed, and would share the parent's turn slot. So ``session/fork`` goes to the
fork's own fresh adapter only, which is where a fork natively backed by the
agent's storage works anyway; an agent that can fork only sessions it holds in
memory gets acpgate's fork instead.

A fork that fails once its row exists (the adapter cannot start, or refuses its
history) is deleted again with its copied history: the client never learned its
id, and it would only hold the token's storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Awaitable
from typing import Any

from services.common.jsonrpc import Answered, JsonRpcError
from services.common.logs import get_logger
from services.common.mcp_policy import ClientMcpRules
from services.common.principals import principal_of_owner
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    MSG_SUBAGENT_FORK,
    STORAGE_QUOTA_EXCEEDED,
)
from services.edge.adapter.client import AdapterClient
from services.edge.adapter.failures import fork_error
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import Forked, Reader, SessionRow
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers.param_checks import check_fork
from services.edge.dialect.handlers.restore import subagent_refused
from services.edge.dialect.mcp_admission import admitted_servers, client_mcp_rules
from services.edge.dialect.visibility import visible_row
from services.edge.errors import not_found, service_error
from services.edge.params import (
    additional_directories,
    client_cwd,
    encode_mcp_servers,
    passed_params,
    restore_mcp_servers,
    session_id,
)
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.prompt_result import fork_result
from services.edge.sessions.seeding import carry_over, fork_external, resume_builtin
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.session_setup import (
    creating,
    mark_active,
    reserved_slot,
    setting_up,
    spawn_adapter,
)
from services.edge.sessions.session_state import reapply

log = get_logger("edge.dialect")
#: The params of session/fork acpgate reads itself (the rest passes to an external agent).
_OWN_FORK_KEYS = frozenset({"sessionId", "session_id", "cwd", "workspaceDir", "workspace_dir",
                            "mcpServers", "additionalDirectories"})


async def session_fork(conn: DialectConnection, params: dict[str, Any]) -> Answered:
    """ACP ``session/fork`` (steps: module doc)."""
    rt = conn.runtime
    parent_id = session_id(params)
    if not rt.persistent:
        raise not_found(parent_id)
    cwd = client_cwd(params, remote=conn.remote)
    extra = additional_directories(params)
    async with reserved_slot(rt, conn.caller.principal, explain=conn.remote,
                             validate=lambda: check_fork(conn, parent_id, cwd, extra)) as slot:
        parent = await visible_row(rt, conn.caller, parent_id)
        if parent.subagent:
            raise subagent_refused(parent, MSG_SUBAGENT_FORK)
        if (live := rt.registry.active.get(parent_id)) is not None:
            await live.history_settled()  # the copy holds what its clients saw end
        # The fork is the parent's principal's (the operator may fork any token's session).
        await slot.charge(principal_of_owner(parent.ownership.owner_session_key))
        client_mcp = client_mcp_rules(conn)
        mcp, passed = restore_mcp_servers(params, parent.mcp_servers_json)
        mcp = await admitted_servers(client_mcp, mcp, stored=not passed)
        sid = str(uuid.uuid4())
        with creating(rt.registry, sid):
            reader = Reader(operator=True) if conn.caller.operator \
                else Reader(requester_session_key=conn.caller.principal)
            taken_at = rt.clock()
            forked = await _fork_row(rt, parent_id, rt.session_service.fork_session(
                parent_id, sid, reader=reader, gateway_instance_id=rt.gateway_instance_id,
                host=rt.claims.host, public_url=rt.claims.public_url, cwd=cwd,
                base_dir=os.getcwd(), local_user=not conn.remote,
                additional_directories=extra,
                mcp_servers_json=encode_mcp_servers(mcp) if passed else None))
            session = EdgeSession(rt, conn, forked.session, rt.clock)
            session.claimed_at = taken_at  # the claim is at least as fresh as the request
            try:
                async with setting_up(conn, session):
                    session.clients.hold()  # its updates follow the answer that names it
                    client = await spawn_adapter(conn, session, forked.agent, forked.policy)
                    adapter_sid = await _seed(session, client, forked, mcp, client_mcp,
                                              passed_params(params, _OWN_FORK_KEYS))
                    session.state.on_setup(client.setup_result)
                    await reapply(session.state, client, forked.session)
                    await mark_active(conn, session, adapter_sid)
            except BaseException:
                # Gone before the client hears of the failure; a runtime task, so a request
                # cancelled meanwhile still leaves nothing behind.
                discard = rt.spawn(_discard(rt, session))
                with contextlib.suppress(Exception):
                    await asyncio.shield(discard)
                raise
    return Answered(fork_result(client.setup_result, session.state.result_fields(),
                                builtin=client.builtin, session_id=sid, forked_from=parent_id),
                    session.clients.release_held)


async def _fork_row(rt: EdgeHub[EdgeSession], parent_id: str, call: Awaitable[Forked]) -> Forked:
    """``ForkSession``; its claim's generation noted for this host's writes. Refusals are the
    client's errors: the parent gone meanwhile "not found", a bad ``cwd`` or extra root
    -32602, the token's storage quota -32004 with the quota's sentence."""
    try:
        forked = await call
    except ServiceError as exc:
        if exc.kind is Failure.EXHAUSTED:
            raise JsonRpcError(STORAGE_QUOTA_EXCEEDED, exc.detail or "Quota exceeded") \
                from None
        raise service_error(exc, parent_id) from None
    rt.claims.held(forked.session)
    return forked


def _served_elsewhere(rt: EdgeHub[EdgeSession], parent: SessionRow) -> bool:
    """Whether another host serves the parent now (a live claim not this host's): its agent
    there may know turns not stored yet, and this host's agent an older conversation."""
    claim = parent.claim
    return bool(claim.instance_id) and claim.instance_id != rt.claims.instance_id \
        and claim.until >= int(time.time() * 1000)


async def _seed(session: EdgeSession, client: AdapterClient,
                forked: Forked, mcp: list[Any],
                client_mcp: ClientMcpRules, extra: dict[str, Any]) -> str:
    """Give the fork's adapter its conversation (module doc; an external one: with
    ``extra``, the client's other params); the adapter's session id. An adapter's error is
    passed on exactly; another failure answers "Failed to fork session: <cause>"."""
    rt, row, parent = session.runtime, forked.session, forked.parent
    policy = forked.policy
    try:
        if forked.agent.kind == AGENT_KIND_BUILTIN:
            how, adapter_sid = "history", await resume_builtin(rt, client, row, policy, mcp,
                                                               client_mcp)
        elif forked.agent.alias == parent.agent_alias and not _served_elsewhere(rt, parent) \
                and await fork_external(client, parent.adapter_session_id, row, mcp, extra):
            how, adapter_sid = "native", client.adapter_session_id
        else:
            how, adapter_sid = "carry_over", await carry_over(rt, session, client, row, policy,
                                                              mcp, extra)
    except Exception as exc:
        raise fork_error(exc, client.secrets, forked.agent.alias) from None
    log.info("session_fork_seeded", session_id=row.session_id,
             parent_session_id=parent.session_id, agent=forked.agent.alias, how=how)
    return adapter_sid


async def _discard(rt: EdgeHub[EdgeSession], session: EdgeSession) -> None:
    """Delete a fork whose setup failed, once its release (adapter, lease, claim) is done:
    nobody knows its id."""
    if session.releasing is not None:
        with contextlib.suppress(Exception):
            await asyncio.shield(session.releasing)
    try:
        await rt.session_service.delete_session(session.session_id, rt.claims.instance_id)
    except ServiceError as exc:
        log.warning("fork_discard_failed", session_id=session.session_id, code=exc.code)
