"""Where the edge keeps sessions that no client connection drives.

A session spawned by another session's ``sessions_spawn`` — or brought up again
for a ``sessions_send`` — has no client of its own. It lives in the
:class:`HostedPort` of the session it runs for (its *host*), which stands in
for a client connection everywhere a session is set up and run:

- nobody watches its stream: its updates are accumulated and stored like any
  turn, but sent nowhere (the host's tool call carries the reply);
- its permission and elicitation requests reach the human through the host's
  own client connection (up the chain, for a grandchild), under the host's
  session id and labelled with the asking session's id and agent
  (``[<agent> · session <id>] …`` in the title, ``_meta.acpgate.childSessionId``
  and ``agent``); its ``elicitation/complete`` notifications follow the same way,
  unchanged (the elicitation id is the asking agent's own). The relay never answers them itself: the asking agent's own
  approval rules — under a policy the session service capped at the host's
  autonomy — decide whether to ask at all;
- it closes when its host is released (the runtime releases a session's
  dependents with it; see ``EdgeRuntime.release``), and it is "closed" for a
  setup that finishes after that.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from services.common.acp.schema import ClientCapabilities
from services.common.protocol import (
    A2A_LABEL,
    META_ACPGATE,
    META_AGENT,
    META_CHILD_SESSION_ID,
)
from services.edge.caller import Caller
from services.edge.ports.backchannel import ClientGone

if TYPE_CHECKING:
    from services.edge.sessions.session import EdgeSession

__all__ = ["HostedPort", "hosted_port", "labelled"]


def labelled(params: dict[str, Any], host_session_id: str, origin_session_id: str,
             agent: str) -> dict[str, Any]:
    """A relayed request's params for the host's client: the host's session id, and —
    once, at the first hop — the label of the session that asked."""
    out = copy.deepcopy(params)
    out["sessionId"] = host_session_id
    meta = _object(out.get("_meta"))
    ours = _object(meta.get(META_ACPGATE))
    if META_CHILD_SESSION_ID not in ours:
        ours = {**ours, META_CHILD_SESSION_ID: origin_session_id, META_AGENT: agent}
        label = A2A_LABEL.format(agent=agent, session_id=origin_session_id)
        tool_call = out.get("toolCall")
        if isinstance(tool_call, dict):
            tool_call["title"] = label + str(tool_call.get("title") or "")
        if isinstance(out.get("message"), str):  # elicitation/create
            out["message"] = label + out["message"]
    out["_meta"] = {**meta, META_ACPGATE: ours}
    return out


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _RelayToHost:
    """The back-channel of hosted sessions: the host's own, under the host's id."""

    def __init__(self, port: HostedPort) -> None:
        self._port = port

    async def request(self, method: str, params: dict[str, Any], wait_secs: float) -> Any:
        host = self._port.host
        if host.released:
            raise ClientGone(f"the session {host.session_id} this one runs for has closed")
        origin = str(params.get("sessionId") or "")
        asking = self._port.sessions.get(origin)
        relayed = labelled(params, host.session_id, origin, asking.alias if asking else "")
        return await host.asking.request(method, relayed, wait_secs)


class HostedPort:
    """The stand-in client connection of the sessions the edge runs for ``host``."""

    def __init__(self, host: EdgeSession) -> None:
        self.host = host
        self.runtime = host.runtime
        #: Acts for the host's principal, never as the operator: a restore for the host
        #: (sessions_send) reads the row as that principal.
        self.caller = Caller(host.principal)
        #: The sessions running for ``host``, by id (setup enters them here).
        self.sessions: dict[str, EdgeSession] = {}
        self.backchannel = _RelayToHost(self)
        #: The human's client is a gateway client: the ``mcpServers`` a session restored
        #: for the host may start follow that client's rules.
        self.remote = host.port.remote
        #: A hosted session's requests of methods acpgate does not know are not passed up
        #: to the host's client: they are not the host's session's.
        self.passes_unknown = False
        #: A hosted session goes with its host, never detached on its own.
        self.detach_grace_secs = 0.0
        #: Connection-level agent calls are the host's client's own, never replayed here.
        self.agent_state = None

    @property
    def client_capabilities(self) -> ClientCapabilities:
        """The human's client's capabilities (elicitation passes through to the adapter)."""
        return self.host.port.client_capabilities

    @property
    def closed(self) -> bool:
        """True once the host is released: nothing may start for it any more."""
        return self.host.released

    async def send(self, line: str) -> None:
        """Nobody watches a hosted session's stream (its turns are stored)."""

    async def send_many(self, lines: list[str]) -> None:
        """Nobody watches a hosted session's stream (its turns are stored)."""

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Up to the human through the host's client (``elicitation/complete`` of an
        ``elicitation/create`` relayed that way; its id is the asking agent's own)."""
        await self.host.notify_client(method, params)


def hosted_port(host: EdgeSession) -> HostedPort:
    """The :class:`HostedPort` of ``host``, made on first use."""
    port = host.hosted
    if not isinstance(port, HostedPort):
        port = host.hosted = HostedPort(host)
    return port
