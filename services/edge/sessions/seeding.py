"""How a fresh adapter gets a stored conversation: shared by restore (SPEC §8) and fork.

The history is never held whole: :func:`history_pages` reads the
stored pages (``StreamHistory``) one at a time, and each consumer passes a page
on before the next is read —

- :func:`resume_builtin`: the built-in agent is resumed under the session's id with
  ``_meta.acpgate.historyFollows`` and gets the pages as ``_acpgate/history_append``
  chunks, each answered before the next is sent;
- :func:`carry_over`: an external agent that cannot restore the session itself
  gets a fresh adapter session, and the newest part of the transcript goes along
  with the first prompt (:class:`~services.edge.sessions.history_wire.CarryOver`).

An external agent restores or forks its own session when it can:
:func:`restore_external` (its ``session/resume``, else its ``session/load``
with the replay suppressed: the edge replays from the store) and
:func:`fork_external` (its ``session/fork``). Either is False when the agent
cannot or refuses, and the caller carries the transcript over instead. The
client's params acpgate does not read (``extra``) go to the agent's own
request as they came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.mcp_policy import ClientMcpRules
from services.common.policy import SecurityPolicy
from services.common.protocol import M_SESSION_FORK, M_SESSION_LOAD, M_SESSION_RESUME
from services.edge.adapter.client import AdapterClient
from services.edge.adapter.requests import setup_params
from services.edge.backends.errors import ServiceError
from services.edge.backends.session_types import HistoryItem, SessionRow
from services.edge.errors import service_error
from services.edge.sessions.history_wire import CarryOver, history_meta
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.session import EdgeSession

__all__ = ["carry_over", "fork_external", "history_pages", "restore_external",
           "resume_builtin"]

log = get_logger("edge.seeding")


async def history_pages(rt: EdgeHub[EdgeSession], sid: str
                        ) -> AsyncIterator[Sequence[HistoryItem]]:
    """The stored items of ``sid``, oldest first, one ``StreamHistory`` page at a time (the
    next is read only when the caller asks for it); a failure is the client's error."""
    try:
        async with aclosing(rt.session_service.stream_history(sid)) as pages:
            async for items in pages:
                yield items
    except ServiceError as exc:
        raise service_error(exc, sid) from None


async def resume_builtin(rt: EdgeHub[EdgeSession], client: AdapterClient, row: SessionRow,
                         policy: SecurityPolicy, mcp: list[Any],
                         client_mcp: ClientMcpRules) -> str:
    """The built-in agent: ``session/resume`` under the row's agent session id (its own id
    when it has none yet: a fork), how the client's MCP servers run in ``_meta``, then the
    row's history, page by page, as ``_acpgate/history_append`` chunks; that id."""
    adapter_sid = row.adapter_session_id or row.session_id
    chunks = (history_meta(items) async for items in history_pages(rt, row.session_id))
    await client.resume_builtin(adapter_sid, row.workspace_dir, mcp, policy, chunks,
                                list(row.additional_directories), client_mcp)
    return adapter_sid


async def carry_over(rt: EdgeHub[EdgeSession], session: EdgeSession, client: AdapterClient,
                     row: SessionRow, policy: SecurityPolicy,
                     mcp: list[Any], extra: dict[str, Any] | None = None) -> str:
    """A fresh adapter session (``extra``: the client's other params, for an external
    agent); the newest part of the row's transcript goes along with the first prompt
    (:class:`~services.edge.sessions.history_wire.CarryOver`). The adapter's id."""
    adapter_sid = await client.new_session(row.workspace_dir, mcp, policy,
                                           list(row.additional_directories), extra=extra)
    carry = CarryOver()
    async for items in history_pages(rt, row.session_id):
        carry.add(items)
    session.pending_history = carry.text()
    return adapter_sid


async def restore_external(client: AdapterClient, row: SessionRow,
                           mcp: list[Any], extra: dict[str, Any]) -> bool:
    """An external agent's own restore of the row's agent session, when it advertises how:
    ``session/resume`` (no replay), else ``session/load`` (its replay dropped).

    False when it cannot or refuses (it no longer knows that session) — and when its load
    replayed nothing of its side of a conversation the store holds: it answered, but lost
    the conversation (gemini-cli 0.61 at times starts a session's record anew while its
    load reads it). The caller then carries the transcript over.
    """
    if not row.adapter_session_id:
        return False
    params = dict(extra)
    params.update(setup_params(row.adapter_session_id, row.workspace_dir, mcp,
                               list(row.additional_directories)))
    caps = client.agent_capabilities
    try:
        if caps.session_capabilities.resume is not None:
            result = await client.quiet_request(M_SESSION_RESUME, params)
        elif caps.load_session:
            result = await client.quiet_request(M_SESSION_LOAD, params)
            if row.stored_bytes > 0 and not client.replayed_own:
                log.warning("adapter_load_lost_history", session_id=row.session_id,
                            alias=client.alias)
                # Its replay may still come, after the answer: never the client's.
                client.abandoned_sessions.add(row.adapter_session_id)
                return False
        else:
            return False
    except JsonRpcError:
        client.abandoned_sessions.add(row.adapter_session_id)
        return False
    client.adapter_session_id = row.adapter_session_id
    client.setup_result = result
    client.restored_itself = True
    return True


async def fork_external(client: AdapterClient, parent_session_id: str,
                        row: SessionRow, mcp: list[Any],
                        extra: dict[str, Any]) -> bool:
    """ACP ``session/fork`` of the parent's own session (``parent_session_id``, the agent's
    id) for the fork ``row``, asked of ``client`` — a fresh process of the fork's own lease,
    never the parent's: an agent that keeps its sessions where a new process finds them
    (claude-agent-acp) forks it natively. False when the adapter does not advertise
    ``sessionCapabilities.fork`` or refuses (it does not know that session here): the
    caller then opens a fresh session carrying the transcript."""
    if not parent_session_id or client.agent_capabilities.session_capabilities.fork is None:
        return False
    params = dict(extra)
    params.update(setup_params(parent_session_id, row.workspace_dir, mcp,
                               list(row.additional_directories)))
    try:
        result = await client.setup_request(M_SESSION_FORK, params)
    except JsonRpcError:
        return False
    sid = result.get("sessionId") if isinstance(result, dict) else None
    if not isinstance(sid, str) or not sid or sid == parent_session_id:
        raise ValueError("adapter's session/fork result has no new sessionId")
    client.adapter_session_id = sid
    client.setup_result = result
    return True
