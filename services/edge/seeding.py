"""How a fresh adapter gets a stored conversation: shared by restore (SPEC §8) and fork (issue 25).

The history is never held whole (issue 23): :func:`history_pages` reads the
stored pages (``StreamHistory``) one at a time, and each consumer passes a page
on before the next is read —

- :func:`resume_builtin`: the built-in agent is resumed under the session's id with
  ``_meta.acpgate.historyFollows`` and gets the pages as ``_acpgate/history_append``
  chunks, each answered before the next is sent;
- :func:`carry_over`: an external agent that cannot restore the session itself
  gets a fresh adapter session, and the newest part of the transcript goes along
  with the first prompt (:class:`~services.edge.history_wire.CarryOver`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from acpgate.session.v1 import session_pb2
from services.common.mcp_policy import ClientMcpRules
from services.common.policy import SecurityPolicy
from services.edge.adapter import AdapterClient
from services.edge.errors import grpc_error
from services.edge.history_wire import CarryOver, history_meta
from services.edge.runtime import EdgeRuntime
from services.edge.session import EdgeSession

__all__ = ["carry_over", "history_pages", "resume_builtin"]


async def history_pages(rt: EdgeRuntime, sid: str
                        ) -> AsyncIterator[Sequence[session_pb2.HistoryItem]]:
    """The stored items of ``sid``, oldest first, one ``StreamHistory`` page at a time (the
    next is read only when the caller asks for it); a failure is the client's error."""
    stream = rt.session_stub.StreamHistory(session_pb2.StreamHistoryRequest(session_id=sid))
    try:
        async for page in stream:
            yield page.items
    except grpc.aio.AioRpcError as exc:
        raise grpc_error(exc, sid) from None
    finally:
        stream.cancel()


async def resume_builtin(rt: EdgeRuntime, client: AdapterClient, row: session_pb2.SessionRow,
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


async def carry_over(rt: EdgeRuntime, session: EdgeSession, client: AdapterClient,
                     row: session_pb2.SessionRow, policy: SecurityPolicy,
                     mcp: list[Any]) -> str:
    """A fresh adapter session; the newest part of the row's transcript goes along with the
    first prompt (:class:`~services.edge.history_wire.CarryOver`). The adapter's id."""
    adapter_sid = await client.new_session(row.workspace_dir, mcp, policy,
                                           list(row.additional_directories))
    carry = CarryOver()
    async for items in history_pages(rt, row.session_id):
        carry.add(items)
    session.pending_history = carry.text()
    return adapter_sid
