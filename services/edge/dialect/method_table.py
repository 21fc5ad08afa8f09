"""The one table of the ACP methods a client calls on acpgate, per protocol version.

Each :class:`Method` row declares one method: its wire name in v1 and in v2 (None
where a version lacks it), the handler that serves it (v2's where it differs), whether
acpgate serves it, serves it and never relays it (it creates or joins sessions, which
the edge must know), or leaves it to the relay (the session's adapter or the
connection's agent), whether an observer may call it naming a session it watches, and
the capability ``initialize`` advertises for it. Everything a connection routes is
read from :data:`METHODS`:

- :data:`DIALECTS`: each version's :class:`~services.edge.dialect.dispatch.Dialect`
  (handlers by wire name, the observer's methods, the capabilities), which
  ``initialize`` picks and reads;
- :func:`fallback`: what serves a method no handler serves (the relay), never passing
  on the methods :data:`UNRELAYED`, and passing a session-less one to the connection's
  agent only when :data:`TO_AGENT` (or ``_`` prefixed).

A v1 method v2 removed (``authenticate``, ``logout``, ``session/load``,
``session/set_mode``) is -32601 for a v2 client, never relayed; a v2-only method on a
v1 connection goes to the relay like any method acpgate does not know. Every v2
handler answers "session not found" as v2 says (-32002 with ``data.sessionId``):
v1's handlers are wrapped in :func:`~services.edge.dialect.v2.methods.v2_errors`.

Adding a method: one row here, its handler, a test.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.common.acp.v2.names import (
    M_AUTH_LOGIN,
    M_AUTH_LOGOUT,
    M_TERMINAL_CANCEL,
    M_TOOL_CALL_CANCEL,
    PROTOCOL_V1,
    PROTOCOL_V2,
)
from services.common.attach_protocol import M_SESSION_ATTACH, M_SESSION_DETACH
from services.common.jsonrpc import JsonRpcError
from services.common.protocol import (
    M_AGENTS_LIST,
    M_AUTHENTICATE,
    M_CANCEL_REQUEST,
    M_HOST_CANCEL,
    M_HOST_CLOSE,
    M_HOST_PS,
    M_INITIALIZE,
    M_LOGOUT,
    M_PROVIDERS_DISABLE,
    M_PROVIDERS_LIST,
    M_PROVIDERS_SET,
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
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
)
from services.edge.dialect import host_view
from services.edge.dialect.advertised import Capability, V2Place
from services.edge.dialect.agents_list import agents_list
from services.edge.dialect.dispatch import Dialect, DialectConnection, Handler
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
from services.edge.dialect.v2 import background, prompt, setup
from services.edge.dialect.v2.methods import refused, v2_errors

__all__ = ["DIALECTS", "METHODS", "TO_AGENT", "UNRELAYED", "Method", "Route", "fallback"]


class Route(enum.Enum):
    """Who answers a method."""

    #: acpgate's handler (which may ask the agent on the way).
    SERVED = "served"
    #: acpgate's handler, and the relay never passes it on: it creates or joins sessions,
    #: which the edge must know (without a handler it is -32601).
    OWN = "own"
    #: The relay: the session's adapter, or the connection's agent when it names none.
    RELAYED = "relayed"


@dataclass(frozen=True)
class Method:
    """One ACP method a client calls (module doc)."""

    #: Its wire name in v1, and in v2 (None: the version lacks it).
    v1: str | None
    v2: str | None
    #: What serves it: v1's handler (v2's too unless :attr:`handler_v2`), none when relayed.
    handler: Handler | None = None
    #: v2's handler where it differs from v1's (used as it is, not wrapped).
    handler_v2: Handler | None = None
    route: Route = Route.SERVED
    #: An observer may call it naming a session it only watches: leaving it, attaching
    #: (answered "attached already"), listing, forking the stored copy (a new session; the
    #: live one is untouched) and the operator's host view. Every other method naming an
    #: observed session (anything that changes or ends the live session or its agent's
    #: state, relayed methods included) is -32006.
    observer: bool = False
    #: What ``initialize`` advertises for it (in both versions that have it).
    capability: Capability | None = None

    def __post_init__(self) -> None:
        served = self.handler is not None or self.handler_v2 is not None
        if served == (self.route is Route.RELAYED):
            raise ValueError(f"{self.v1 or self.v2}: a relayed method has no handler, "
                             "a served one has one")

    def name(self, version: int) -> str | None:
        """Its wire name in ``version``."""
        return self.v1 if version == PROTOCOL_V1 else self.v2

    def served_by(self, version: int) -> Handler | None:
        """Its handler in ``version`` (None: relayed, or the version lacks it)."""
        if self.name(version) is None or self.route is Route.RELAYED:
            return None
        if version == PROTOCOL_V1:
            return self.handler
        if self.handler_v2 is not None:
            return self.handler_v2
        return v2_errors(self.handler) if self.handler is not None else None


def _both(name: str, handler: Handler | None = None, **kw: Any) -> Method:
    """A method of the same name in both versions."""
    return Method(name, name, handler, **kw)


def _stored(key: str, v2: V2Place = V2Place.BASELINE) -> Capability:
    """``sessionCapabilities.<key>``, served from acpgate's store."""
    return Capability(f"sessionCapabilities.{key}", v2=v2)


#: Every ACP method a client calls that acpgate knows, in both versions.
METHODS: tuple[Method, ...] = (
    _both(M_INITIALIZE, initialize.initialize),
    # v2 authenticates with auth/login (and logs out with auth/logout).
    Method(M_AUTHENTICATE, None, agent_calls.authenticate),
    Method(M_LOGOUT, None, route=Route.RELAYED),
    Method(None, M_AUTH_LOGIN, handler_v2=setup.auth_login),
    Method(None, M_AUTH_LOGOUT, handler_v2=setup.auth_logout),
    _both(M_PROVIDERS_LIST, route=Route.RELAYED),
    _both(M_PROVIDERS_SET, route=Route.RELAYED),
    _both(M_PROVIDERS_DISABLE, route=Route.RELAYED),
    _both(M_SESSION_NEW, new.session_new, handler_v2=v2_errors(setup.session_new),
          capability=_stored("additionalDirectories", V2Place.MARKER)),
    _both(M_SESSION_PROMPT, turns.session_prompt, handler_v2=v2_errors(prompt.session_prompt)),
    # v2: a child session's cancel goes to its agent (services.edge.dialect.v2.background).
    _both(M_SESSION_CANCEL, turns.session_cancel,
          handler_v2=v2_errors(background.session_cancel)),
    _both(M_SESSION_STOP, turns.session_stop),
    _both(M_SESSION_CLOSE, turns.session_close, capability=_stored("close")),
    # v2 replays a stored session with session/resume's replayFrom instead.
    Method(M_SESSION_LOAD, None, restore.session_load,
           capability=Capability("loadSession")),
    _both(M_SESSION_RESUME, restore.session_resume,
          handler_v2=v2_errors(setup.session_resume), capability=_stored("resume")),
    _both(M_SESSION_FORK, fork.session_fork, route=Route.OWN, observer=True,
          capability=_stored("fork", V2Place.META)),
    _both(M_SESSION_ATTACH, attach.session_attach, route=Route.OWN, observer=True,
          capability=Capability("sessionCapabilities.attach", needs_store=False,
                                remote_only=True, v2=V2Place.META)),
    _both(M_SESSION_DETACH, attach.session_detach, route=Route.OWN, observer=True),
    _both(M_SESSION_LIST, stored.session_list, observer=True, capability=_stored("list")),
    _both(M_SESSION_DELETE, delete.session_delete,
          capability=_stored("delete", V2Place.MARKER)),
    # v2 sets a mode as the config option of category "mode" instead.
    Method(M_SESSION_SET_MODE, None, modes.session_set_mode),
    _both(M_SESSION_SET_CONFIG_OPTION, modes.session_set_config_option,
          handler_v2=v2_errors(setup.session_set_config_option)),
    _both(M_SESSION_SET_MODEL, modes.session_set_model),
    _both(M_CANCEL_REQUEST, turns.cancel_request),
    # v2's cancels of background work, to the session's (or child's) v2 agent.
    Method(None, M_TOOL_CALL_CANCEL, handler_v2=v2_errors(background.tool_call_cancel)),
    Method(None, M_TERMINAL_CANCEL, handler_v2=v2_errors(background.terminal_cancel)),
    _both(M_SESSION_UPDATE, stored.session_event),
    _both(M_SESSION_EVENT, stored.session_event),
    # The agents a client may start (the console's agent picker; any caller).
    _both(M_AGENTS_LIST, agents_list),
    # The console's host view: admin tokens only (services.edge.dialect.host_view).
    _both(M_HOST_PS, host_view.host_ps, observer=True),
    _both(M_HOST_CANCEL, host_view.host_cancel, observer=True),
    _both(M_HOST_CLOSE, host_view.host_close, observer=True),
)

#: Session-less methods the relay passes to the connection's agent (:attr:`Route.RELAYED`;
#: ``_`` extension methods too), whatever a version calls them.
TO_AGENT: frozenset[str] = frozenset(
    name for m in METHODS if m.route is Route.RELAYED for name in (m.v1, m.v2) if name)
#: Methods the relay never passes on (:attr:`Route.OWN`), whatever a version calls them.
UNRELAYED: frozenset[str] = frozenset(
    name for m in METHODS if m.route is Route.OWN for name in (m.v1, m.v2) if name)


def _dialect(version: int) -> Dialect:
    handlers: dict[str, Handler] = {}
    for m in METHODS:
        name, handler = m.name(version), m.served_by(version)
        if version != PROTOCOL_V1 and name is None and m.v1 is not None:
            handlers[m.v1] = refused(m.v1)  # removed in this version: never relayed
        elif name is not None and handler is not None:
            handlers[name] = handler
    return Dialect(
        handlers=handlers,
        observer_methods=frozenset(
            name for m in METHODS if m.observer and (name := m.name(version))),
        capabilities=tuple(m.capability for m in METHODS
                           if m.capability is not None and m.name(version) is not None
                           and m.served_by(version) is not None),
    )


#: The routing of each version a client may pick (``initialize`` chooses).
DIALECTS: Mapping[int, Dialect] = {PROTOCOL_V1: _dialect(PROTOCOL_V1),
                                   PROTOCOL_V2: _dialect(PROTOCOL_V2)}


async def _to_agent(conn: DialectConnection, method: str, params: dict[str, Any],
                    notification: bool) -> Any:
    """A session-less method: the connection's agent's when :data:`TO_AGENT` or ``_``
    prefixed, else -32601 (a notification: nothing)."""
    if method in TO_AGENT or method.startswith("_"):
        return await agent_calls.connection_call(conn, method, params, notification)
    if notification:
        return None
    raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))


async def fallback(conn: DialectConnection, method: str, params: dict[str, Any],
                   notification: bool) -> Any:
    """A method no handler of the connection's dialect serves: relayed to the session's
    adapter, or to the connection's agent
    (:func:`services.edge.dialect.handlers.relay.relay_unknown`)."""
    return await relay.relay_unknown(conn, method, params, notification, unrelayed=UNRELAYED,
                                     connection_level=_to_agent)
