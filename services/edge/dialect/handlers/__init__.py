"""What each dialect method does (SPEC §2–§8), one module per SPEC area.

Every handler takes the :class:`~services.edge.dialect.dispatch.DialectConnection` the
request arrived on and the request's params, validates in the order the SPEC
gives, and returns the result or raises a :class:`JsonRpcError`; the
connection answers. :data:`METHODS` is the table a connection is handed, and
:func:`fallback` what serves a method it has no handler for: the relay to the
agent (:mod:`services.edge.dialect.handlers.relay`) — except the methods of
:data:`UNRELAYED`, which acpgate must understand and which stay -32601 until this
table serves them. The table is the one place that decides which methods
acpgate serves itself (and so what ``initialize`` advertises of them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common.attach_protocol import (
    M_SESSION_ATTACH,
    M_SESSION_DETACH,
)
from services.common.protocol import (
    M_AGENTS_LIST,
    M_AUTHENTICATE,
    M_CANCEL_REQUEST,
    M_INITIALIZE,
    M_SESSION_CANCEL,
    M_SESSION_CLOSE,
    M_SESSION_DELETE,
    M_SESSION_EVENT,
    M_SESSION_FORK,
    M_SESSION_LIST,
    M_SESSION_LOAD,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    M_SESSION_RESUME,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    M_SESSION_SET_MODEL,
    M_SESSION_STOP,
    M_SESSION_UPDATE,
)
from services.edge.dialect.agents_list import agents_list
from services.edge.dialect.dispatch import DialectConnection, Handler
from services.edge.dialect.handlers import (
    agent_calls,
    attach,
    delete,
    fork,
    initialize,
    modes,
    new,
    relay,
    restore,
    stored,
    turns,
)
from services.edge.dialect.host_view import HOST_METHODS

#: Method name → handler, for every method a client may call.
METHODS: Mapping[str, Handler] = {
    M_INITIALIZE: initialize.initialize,
    M_AUTHENTICATE: agent_calls.authenticate,
    M_SESSION_NEW: new.session_new,
    M_SESSION_PROMPT: turns.session_prompt,
    M_SESSION_CANCEL: turns.session_cancel,
    M_SESSION_STOP: turns.session_stop,
    M_SESSION_CLOSE: turns.session_close,
    M_SESSION_LOAD: restore.session_load,
    M_SESSION_RESUME: restore.session_resume,
    M_SESSION_FORK: fork.session_fork,
    M_SESSION_ATTACH: attach.session_attach,
    M_SESSION_DETACH: attach.session_detach,
    M_SESSION_LIST: stored.session_list,
    M_SESSION_DELETE: delete.session_delete,
    M_SESSION_SET_MODE: modes.session_set_mode,
    M_SESSION_SET_CONFIG_OPTION: modes.session_set_config_option,
    M_SESSION_SET_MODEL: modes.session_set_model,
    M_CANCEL_REQUEST: turns.cancel_request,
    M_SESSION_UPDATE: stored.session_event,
    M_SESSION_EVENT: stored.session_event,
    # The agents a client may start (the console's agent picker; any caller).
    M_AGENTS_LIST: agents_list,
    # The console's host view: admin tokens only (services.edge.dialect.host_view).
    **HOST_METHODS,
}

#: Methods the relay never passes on: they create sessions, which the edge must know. Each
#: answers -32601 until :data:`METHODS` has a handler for it (which then serves it).
UNRELAYED: frozenset[str] = frozenset({M_SESSION_FORK, M_SESSION_ATTACH, M_SESSION_DETACH})


async def fallback(conn: DialectConnection, method: str, params: dict[str, Any],
                   notification: bool) -> Any:
    """A method :data:`METHODS` does not serve: relayed to the session's adapter, or to the
    connection's agent (:func:`services.edge.dialect.handlers.relay.relay_unknown`)."""
    return await relay.relay_unknown(conn, method, params, notification, unrelayed=UNRELAYED,
                                     connection_level=agent_calls.connection_call)
