"""Everything acpgate does not need to understand passes through: the relay of a
client's requests that no handler of the method table serves.

A request (or notification) whose method has no handler, and that carries the
``sessionId`` of a session *this connection* holds, goes to that session's
adapter — ``session/set_model``, ``_``-prefixed extension methods, methods of
later ACP versions — with the session id rewritten to the adapter's own, and the
adapter's answer comes back whole (its result, with the adapter's session id
rewritten back where it names the session; or its error, code and message
exactly, acpgate's context in ``data.acpgate``). A session id this connection
does not hold — another connection's, another token's, none at all — answers
-32000 ``Session not found``, exactly like an unknown one: nothing reaches any
adapter. A method without a session id is the connection's agent's
(:mod:`services.edge.dialect.handlers.connection_agent`: ``logout``, ``providers/*``,
``_``-prefixed methods), anything else -32601.

Never relayed: methods acpgate must understand because they create or join sessions
(the method table's ``UNRELAYED``: ``session/fork``, ``attach``, ``detach``; -32601 when
no handler serves them), acpgate's own ``_acpgate/*`` namespace, and ``_meta.acpgate`` in
any params (acpgate's namespace toward its agents is the edge's to write).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    ACPGATE_METHOD_PREFIX,
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
)
from services.edge.adapter.failures import agent_error, exit_data
from services.edge.adapter.link import AdapterGone
from services.edge.dialect.dispatch import DialectConnection
from services.edge.params import without_acpgate_meta
from services.edge.sessions.session import EdgeSession

__all__ = ["forward", "relay_unknown"]

#: A handler of connection-level methods (the connection's agent), given by the table.
ConnectionRelay = Callable[[DialectConnection, str, dict[str, Any], bool], Awaitable[Any]]


def _not_found(method: str) -> JsonRpcError:
    return JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))


def _swap_sid(value: Any, old: str, new: str) -> Any:
    """``value`` with a top-level ``sessionId`` of ``old`` replaced by ``new``."""
    if isinstance(value, dict) and value.get("sessionId") == old and old:
        return {**value, "sessionId": new}
    return value


async def forward(session: EdgeSession, method: str, params: dict[str, Any], *,
                  notification: bool = False) -> Any:
    """``method`` with the client's ``params`` on the session's adapter, under the
    adapter's session id; the adapter's answer whole (a notification: none).

    The adapter's error keeps its code, message and data (acpgate's context in
    ``data.acpgate``); an adapter that exits first is -32603 with its exit in
    ``data.acpgate``.
    """
    adapter = session.adapter
    if adapter is None:
        raise JsonRpcError(INTERNAL_ERROR, "Agent is not running")
    session.touch()
    sent = _swap_sid(without_acpgate_meta(params), session.session_id,
                     adapter.adapter_session_id)
    if notification:
        adapter.link.notify(method, sent)
        return None
    try:
        result = await adapter.link.request(method, sent)
    except JsonRpcError as exc:
        raise agent_error(exc, method, adapter.alias) from None
    except AdapterGone as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Agent failed: {exc.exit_info.describe()}",
                           exit_data(exc.exit_info, adapter.secrets)) from None
    finally:
        session.touch()
    return _swap_sid(result, adapter.adapter_session_id, session.session_id)


def relayed(method: str, unrelayed: frozenset[str]) -> bool:
    """Whether the generic relay may pass ``method`` on at all."""
    return method not in unrelayed and not method.startswith(ACPGATE_METHOD_PREFIX)


async def relay_unknown(conn: DialectConnection, method: str, params: dict[str, Any],
                        notification: bool, *, unrelayed: frozenset[str],
                        connection_level: ConnectionRelay) -> Any:
    """The method table's fallback (module doc)."""
    if not relayed(method, unrelayed):
        raise _not_found(method)
    sid = params.get("sessionId")
    if isinstance(sid, str) and sid:
        try:
            session = conn.active_session(sid)
        except JsonRpcError:
            if notification:
                return None
            raise
        return await forward(session, method, params, notification=notification)
    return await connection_level(conn, method, params, notification)
