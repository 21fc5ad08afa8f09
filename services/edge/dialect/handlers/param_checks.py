"""The params of a session/new, fork, load or resume, checked before a -32001 is answered.

A request with bad params gets their -32602 whether or not a slot is free, as if
they had been checked before the slot: each check here runs only when the slot was
refused (``services.edge.sessions.slot_reservation.reserved_slot``'s ``validate``), so a granted
request makes no round trip more. The session service decides, as on the way that
takes the slot: the agent, the cwd, the extra roots (``ResolveAgent``,
``ResolveWorkspace``); a fork's cwd must be its parent's workspace. Failures that are
no verdict on the params (the service unreachable, a row not readable) leave the
answer to the limit. A session/load or resume keeps SPEC §8's order (the limit before
"row exists"): a session it cannot find is left to the limit too.
"""

from __future__ import annotations

import os

from services.common.jsonrpc import JsonRpcError
from services.common.protocol import INVALID_PARAMS, MSG_FORK_CWD, SESSION_NOT_FOUND
from services.edge.backends.errors import Failure, ServiceError
from services.edge.dialect.dispatch import DialectConnection
from services.edge.dialect.visibility import visible_row
from services.edge.errors import service_error

__all__ = ["check_fork", "check_new", "check_restore"]

#: The service's verdicts on the params (the others are no verdict: module doc).
_VERDICTS = (Failure.INVALID, Failure.REFUSED)


async def _workspace(conn: DialectConnection, alias: str, cwd: str,
                     extra: list[str] | None) -> str | None:
    """The real workspace ``cwd`` names for ``alias`` (None: no verdict); its refusal raised."""
    try:
        ws = await conn.runtime.session_service.resolve_workspace(
            alias, cwd, base_dir=os.getcwd(), additional_directories=extra or [],
            local_user=not conn.remote)
    except ServiceError as exc:
        if exc.kind in _VERDICTS:
            raise service_error(exc) from None
        return None
    return ws.workspace_dir


async def check_new(conn: DialectConnection, alias: str, cwd: str,
                    extra: list[str] | None) -> None:
    """session/new's agent, cwd and extra roots (module doc)."""
    try:
        agent = await conn.runtime.session_service.resolve_agent(
            explicit_alias=alias, connection_default=conn.default_agent)
    except ServiceError as exc:
        if exc.kind in _VERDICTS:
            raise service_error(exc) from None
        return
    await _workspace(conn, agent.alias, cwd, extra)


async def check_fork(conn: DialectConnection, parent_id: str, cwd: str,
                     extra: list[str] | None) -> None:
    """session/fork's parent (one the caller may not act on is "not found"), its cwd (the
    parent's workspace, if given) and its extra roots (module doc)."""
    try:
        parent = await visible_row(conn.runtime, conn.caller, parent_id)
    except JsonRpcError as exc:
        if exc.code == SESSION_NOT_FOUND:
            raise
        return
    if not cwd and extra is None:
        return
    real = await _workspace(conn, parent.agent_alias, cwd or parent.workspace_dir, extra)
    if cwd and real is not None and real != parent.workspace_dir:
        raise JsonRpcError(INVALID_PARAMS, MSG_FORK_CWD.format(
            workspace=parent.workspace_dir, cwd=cwd))


async def check_restore(conn: DialectConnection, sid: str, extra: list[str] | None) -> None:
    """session/load's or resume's extra roots, against the stored workspace (module doc)."""
    if extra is None:
        return
    try:
        row = await visible_row(conn.runtime, conn.caller, sid)
    except JsonRpcError:
        return  # SPEC §8: the limit comes before "row exists"
    await _workspace(conn, row.agent_alias, row.workspace_dir, extra)
