"""v2's controls of work beside the foreground turn: ``tool_call/cancel``, ``terminal/cancel``,
and ``session/cancel`` of a child session.

A v2 client names a session this connection drives, or a child session of one (acpgate's
id, from a ``subagent_update``: :mod:`services.common.acp.v2.subagents`). The request goes
to that session's agent under the agent's own id of the session or child, and the agent's
answer comes back whole (its ``-32602`` for an unknown or final tool call included). A
session whose agent speaks v1 has no such controls: ``tool_call/cancel`` and
``terminal/cancel`` are refused with -32601 saying so (v1's one equivalent is
``session/cancel`` of the whole turn). An id naming no session of this connection, nor a
child of one, is "session not found" — never relayed. A child has no setup of its own:
``session/resume`` of one is refused (:func:`refuse_child`) while its parent is live here.
"""

from __future__ import annotations

from typing import Any

from services.common.acp.v2.names import (
    M_TERMINAL_CANCEL,
    M_TOOL_CALL_CANCEL,
    MSG_CHILD_SETUP,
    MSG_NO_V1_CANCEL,
)
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    M_SESSION_CANCEL,
    META_PARENT_SESSION_ID,
    METHOD_NOT_FOUND,
)
from services.edge.adapter.failures import agent_error, exit_data
from services.edge.adapter.link import AdapterGone
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.handlers import turns
from services.edge.errors import not_found
from services.edge.params import session_id, without_acpgate_meta
from services.edge.sessions.session import EdgeSession

__all__ = ["refuse_child", "session_cancel", "terminal_cancel", "tool_call_cancel"]


def _child_of(conn: DialectConnection, sid: str) -> tuple[EdgeSession, str] | None:
    """The session of ``conn`` whose v2 agent has the child ``sid``, and the agent's id of
    that child."""
    for session in conn.sessions.values():
        adapter = session.adapter
        v2 = adapter.link.v2 if adapter is not None else None
        child = v2.wire.children.of_id(sid) if v2 is not None and v2.active else None
        if child is not None:
            return session, child.raw
    return None


def refuse_child(conn: DialectConnection, sid: str) -> None:
    """Raise when ``sid`` is a child session of a session live on this edge that the
    caller's principal holds: a child has no setup of its own (its updates come with its
    parent's). A child of another principal's session is left to the caller's "not
    found"."""
    for session in conn.runtime.registry.active.values():
        adapter = session.adapter
        v2 = adapter.link.v2 if adapter is not None else None
        if v2 is None or not v2.active or session.principal != conn.caller.principal:
            continue
        if v2.wire.children.of_id(sid) is not None:
            raise JsonRpcError(INVALID_PARAMS, MSG_CHILD_SETUP.format(
                session_id=sid, parent=session.session_id),
                {META_PARENT_SESSION_ID: session.session_id})


def _target(conn: DialectConnection, sid: str) -> tuple[EdgeSession, str]:
    session = conn.sessions.get(sid)
    if session is not None and session.adapter is not None:
        return session, session.adapter.adapter_session_id
    found = _child_of(conn, sid)
    if found is None:
        raise not_found(sid)
    return found


async def _relay(conn: DialectConnection, method: str, params: dict[str, Any]) -> Any:
    session, agent_sid = _target(conn, session_id(params))
    adapter = session.adapter
    assert adapter is not None  # _target found the session by its adapter
    if not adapter.link.speaks_v2:
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_NO_V1_CANCEL.format(method=method))
    session.touch()
    try:
        return await adapter.link.request(
            method, {**without_acpgate_meta(params), "sessionId": agent_sid})
    except JsonRpcError as exc:
        raise agent_error(exc, method, adapter.alias) from None
    except AdapterGone as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Agent failed: {exc.exit_info.describe()}",
                           exit_data(exc.exit_info, adapter.secrets)) from None


async def tool_call_cancel(conn: DialectConnection, params: dict[str, Any]) -> Any:
    """``tool_call/cancel``: to the agent of the session (or child) named (module doc)."""
    return await _relay(conn, M_TOOL_CALL_CANCEL, params)


async def terminal_cancel(conn: DialectConnection, params: dict[str, Any]) -> Any:
    """``terminal/cancel``: to the agent of the session (or child) named (module doc)."""
    return await _relay(conn, M_TERMINAL_CANCEL, params)


async def session_cancel(conn: DialectConnection, params: dict[str, Any]) -> dict[str, Any]:
    """``session/cancel``: a child's goes to its agent under the agent's id of the child;
    any other is v1's (the session's running turn)."""
    sid = session_id(params)
    if sid not in conn.sessions:
        found = _child_of(conn, sid)
        if found is not None:
            session, agent_sid = found
            adapter = session.adapter
            assert adapter is not None
            session.touch()
            adapter.link.notify(M_SESSION_CANCEL, {"sessionId": agent_sid})
            return {}
    return await turns.session_cancel(conn, params)
