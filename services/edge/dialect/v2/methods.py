"""How v2 answers what v1's handlers answer: the wrapping the method table
(:mod:`services.edge.dialect.method_table`) applies to v2's routes.

v2's baseline (``session/new``, ``list``, ``resume``, ``close``, ``prompt``, ``cancel``,
``set_config_option``, ``delete``, ``auth/login``, ``auth/logout``) is served by the v2
handlers of this package or by v1's where the shapes agree; acpgate's own methods
(``session/fork``, ``session/attach``/``detach``, ``session/stop``, ``_acpgate/*``) stay
as they are. A v1 handler serving a v2 client answers "session not found" as v2 says:
-32002 with ``data.sessionId`` (:func:`v2_errors`); a v1 method v2 removed is -32601,
never relayed to the agent (:func:`refused`).
"""

from __future__ import annotations

import functools
from typing import Any

from services.common.acp.v2.names import MSG_V2_SESSION_NOT_FOUND
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    ACP_RESOURCE_NOT_FOUND,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
    MSG_SESSION_NOT_FOUND,
    SESSION_NOT_FOUND,
)
from services.edge.dialect.dispatch import DialectConnection, Handler

__all__ = ["refused", "v2_errors"]

_NOT_FOUND_HEAD = MSG_SESSION_NOT_FOUND.split("{", 1)[0]


def v2_errors(handler: Handler) -> Handler:
    """``handler`` with v1's "session not found" (-32000) answered as v2's -32002 with
    ``data.sessionId``."""
    async def served(conn: DialectConnection, params: dict[str, Any]) -> Any:
        try:
            return await handler(conn, params)
        except JsonRpcError as exc:
            if exc.code != SESSION_NOT_FOUND or not exc.message.startswith(_NOT_FOUND_HEAD):
                raise
            sid = exc.message[len(_NOT_FOUND_HEAD):]
            raise JsonRpcError(ACP_RESOURCE_NOT_FOUND, MSG_V2_SESSION_NOT_FOUND.format(
                session_id=sid), {"sessionId": sid}) from None
    return functools.update_wrapper(served, handler)


def refused(method: str) -> Handler:
    """The handler of a method the version lacks: -32601, whatever the params."""
    async def refuse(conn: DialectConnection, params: dict[str, Any]) -> Any:
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))
    return refuse
