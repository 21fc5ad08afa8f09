"""The v2 method table, beside v1's: which handler serves each method for a v2 client.

v2's baseline (``session/new``, ``list``, ``resume``, ``close``, ``prompt``, ``cancel``,
``set_config_option``, ``delete``, ``auth/login``, ``auth/logout``) is served by the v2
handlers of this package or by v1's where the shapes agree. v1's methods that v2
removed (``authenticate``, ``logout``, ``session/load``, ``session/set_mode``) are -32601
for a v2 client, never relayed to the agent. acpgate's own methods (``session/fork``,
``session/attach``/``detach``, ``session/stop``, ``_acpgate/*``) stay as they are.

Every v2 handler answers "session not found" as v2 says: -32002 with ``data.sessionId``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common.acp.v2.names import (
    M_AUTH_LOGIN,
    M_AUTH_LOGOUT,
    MSG_V2_SESSION_NOT_FOUND,
    PROTOCOL_V1,
    PROTOCOL_V2,
)
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    ACP_RESOURCE_NOT_FOUND,
    M_AUTHENTICATE,
    M_LOGOUT,
    M_SESSION_LOAD,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    M_SESSION_RESUME,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
    MSG_SESSION_NOT_FOUND,
    SESSION_NOT_FOUND,
)
from services.edge.dialect.dispatch import DialectConnection, Handler
from services.edge.dialect.handlers import METHODS
from services.edge.dialect.v2 import prompt, setup

__all__ = ["DIALECTS", "METHODS_V2", "v2_errors"]

#: v1 methods v2 removed: -32601 for a v2 client (not relayed to the agent).
REMOVED_IN_V2: frozenset[str] = frozenset({M_AUTHENTICATE, M_LOGOUT, M_SESSION_LOAD,
                                           M_SESSION_SET_MODE})
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
    served.__name__ = getattr(handler, "__name__", "served")
    return served


def _removed(method: str) -> Handler:
    async def refuse(conn: DialectConnection, params: dict[str, Any]) -> Any:
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))
    return refuse


def _table() -> dict[str, Handler]:
    table: dict[str, Handler] = {m: v2_errors(h) for m, h in METHODS.items()}
    table.update({m: _removed(m) for m in REMOVED_IN_V2})
    table.update({
        M_SESSION_NEW: v2_errors(setup.session_new),
        M_SESSION_RESUME: v2_errors(setup.session_resume),
        M_SESSION_PROMPT: v2_errors(prompt.session_prompt),
        M_SESSION_SET_CONFIG_OPTION: v2_errors(setup.session_set_config_option),
        M_AUTH_LOGIN: setup.auth_login,
        M_AUTH_LOGOUT: setup.auth_logout,
    })
    return table


#: Method name → handler for a v2 client.
METHODS_V2: Mapping[str, Handler] = _table()
#: The method table of each version a client may pick (``initialize`` chooses).
DIALECTS: Mapping[int, Mapping[str, Handler]] = {PROTOCOL_V1: METHODS, PROTOCOL_V2: METHODS_V2}
