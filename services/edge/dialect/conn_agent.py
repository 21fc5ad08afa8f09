"""The connection's own agent: what a client sets up with its default agent before, and
beside, any session.

A direct ACP connection has one agent process for everything; behind acpgate each
session has an adapter of its own. :class:`ConnectionAgent` keeps, for one client
connection only, what makes its adapters behave as that one agent would:

- **the calls that set the agent up** — ``authenticate`` (with the client's
  credentials, e.g. gemini-cli's ``_meta["api-key"]``), ``providers/set`` and
  ``providers/disable`` — in the order they succeeded, per alias (what a later
  call replaces is dropped; ``logout`` forgets them all). They are held in this
  object's memory only: never stored, never logged (only method names are), never
  sent to another connection's adapters or to another alias's, and forgotten when
  the connection ends (:meth:`ConnectionAgent.close`). Every adapter of that alias
  this connection starts later gets them, in order, right after ``initialize``
  (:meth:`ConnectionAgent.calls_for`), before its session is set up; the adapters
  of its active sessions get each new one as it succeeds.
- **a held adapter** of the connection's default agent, started when such a call
  needs an agent to answer before any session exists (``authenticate``,
  ``logout``, ``providers/*``, a connection-level ``_`` extension method, or an
  ``initialize`` with nothing recorded to advertise yet). It runs in the agent
  workspace, like a warm adapter, initialized with this client's capabilities
  under the alias's declared autonomy; the connection's next ``session/new`` for
  that alias takes it when its session calls for that very ``initialize``
  (:meth:`ConnectionAgent.take`), else it is let go. It serves no session: its
  updates are dropped, its permission and elicitation requests answered
  cancelled, its ``fs``/``terminal`` requests refused, its session-less
  notifications passed to the client (claude's ``_auth/status_update``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    M_AUTHENTICATE,
    M_PROVIDERS_DISABLE,
    M_PROVIDERS_SET,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
    MSG_POLICY_REFUSED,
    POLICY_REFUSED,
    session_key_for,
)
from services.edge.adapter.agent_meta import foreign
from services.edge.adapter.client import SETUP_TIMEOUT_SECS, AdapterClient
from services.edge.adapter.link import AdapterExit, AdapterLink
from services.edge.adapter.relay_lines import RelayedUpdate
from services.edge.adapter.requests import initialize_request
from services.edge.backends.lifecycle import AttachSpec
from services.edge.backends.session_types import ResolvedAgent
from services.edge.ports.permission import cancelled_answer

if TYPE_CHECKING:
    from services.edge.dialect.dispatch import DialectConnection

log = get_logger("edge.conn_agent")

__all__ = ["REPLAYED", "ConnectionAgent", "HeldAdapter"]

#: The calls replayed to every adapter of the alias the connection starts.
REPLAYED = frozenset({M_AUTHENTICATE, M_PROVIDERS_SET, M_PROVIDERS_DISABLE})


def _key(method: str, params: dict[str, Any]) -> tuple[str, str]:
    """What a later call of the same kind replaces: one authenticate; one providers call per
    provider id."""
    if method == M_AUTHENTICATE:
        return (M_AUTHENTICATE, "")
    provider = params.get("id") or params.get("providerId")
    return ("providers", provider if isinstance(provider, str) else "")


@dataclass
class HeldAdapter:
    """An adapter of the connection's default agent that serves no session (yet)."""

    #: The id of the session that takes it (its lease is keyed by it).
    session_id: str
    agent: ResolvedAgent
    client: AdapterClient
    #: The ``initialize`` params it was sent, and their answer (done once started).
    initialize: dict[str, Any]
    answer: asyncio.Future[Any]
    #: It got the replayed calls as they happened: a session that takes it needs none.
    replayed: bool = True

    @property
    def link(self) -> AdapterLink:
        """The stream to the adapter."""
        return self.client.link

    def serves(self, resolved: ResolvedAgent, initialize: dict[str, Any]) -> bool:
        """True when a session of ``resolved`` calls for this very adapter and ``initialize``."""
        mine = self.agent
        return (resolved.alias, resolved.kind, resolved.launch, initialize) == \
            (mine.alias, mine.kind, mine.launch, self.initialize)


class _HeldHost:
    """The :class:`~services.edge.adapter.client.AdapterHost` of a held adapter (module doc)."""

    def __init__(self, owner: ConnectionAgent) -> None:
        self._owner = owner

    async def on_adapter_updates(self, updates: list[dict[str, Any]]) -> None:
        """No session: nothing to relay."""

    async def on_adapter_update_lines(self, updates: Sequence[RelayedUpdate],
                                      lines: list[str]) -> None:
        """No session: nothing to relay."""

    async def relay_to_client(self, method: str, params: dict[str, Any]) -> Any:
        """No session to ask for: cancelled."""
        return cancelled_answer()

    async def client_method(self, method: str, params: dict[str, Any]) -> Any:
        """No session, so no roots: refused."""
        raise JsonRpcError(POLICY_REFUSED, MSG_POLICY_REFUSED.format(reason="no session"))

    async def notify_client(self, method: str, params: dict[str, Any]) -> None:
        """A session-less notification of the connection's agent goes to its client."""
        if "sessionId" in params:
            return
        with contextlib.suppress(ConnectionError, OSError):
            await self._owner.conn.notify(method, params)

    async def serve_adapter_request(self, method: str, params: dict[str, Any]) -> Any:
        """Nothing is served to an adapter without a session."""
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))

    def on_adapter_exit(self, exit_info: AdapterExit) -> None:
        """The held adapter is gone: the next call that needs one starts another."""
        self._owner.lost()


class ConnectionAgent:
    """What one client connection keeps of its agents (module doc)."""

    def __init__(self, conn: DialectConnection) -> None:
        self.conn = conn
        self._calls: dict[str, dict[tuple[str, str], tuple[str, dict[str, Any]]]] = {}
        self._held: HeldAdapter | None = None
        self._starting = asyncio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ the calls

    def calls_for(self, alias: str) -> list[tuple[str, dict[str, Any]]]:
        """The calls every new adapter of ``alias`` gets after ``initialize``, in order."""
        return list(self._calls.get(alias, {}).values())

    def record(self, alias: str, method: str, params: dict[str, Any]) -> None:
        """``method`` succeeded on ``alias``'s agent: replay it (last of its kind wins)."""
        if self._closed:
            return
        calls = self._calls.setdefault(alias, {})
        key = _key(method, params)
        calls.pop(key, None)  # a replacement goes last, after what it may rely on
        calls[key] = (method, params)

    def forget(self, alias: str) -> None:
        """``logout`` succeeded: nothing more is replayed to ``alias``'s adapters."""
        self._calls.pop(alias, None)

    # ------------------------------------------------------------------ the held adapter

    async def held_for(self, agent: ResolvedAgent) -> HeldAdapter:
        """The held adapter of ``agent`` (started, initialized and given the recorded calls
        when there is none); a held adapter of another alias or launch is let go."""
        async with self._starting:
            held = self._held
            if held is not None and held.agent.alias == agent.alias \
                    and held.agent.launch == agent.launch \
                    and held.link.exit_info is None:
                return held
            self._drop()
            held = await self._start(agent)
            if self._closed:  # the connection ended meanwhile
                held.link.abort()
                raise ConnectionError("client connection closed")
            self._held = held
            return held

    async def _start(self, agent: ResolvedAgent) -> HeldAdapter:
        rt = self.conn.runtime
        sid = str(uuid.uuid4())
        link = AdapterLink(rt.lifecycle, AttachSpec(ensure=rt.warm.ensure_request(
            agent, session_key_for(agent.alias, sid), agent.agent_workspace)), foreign=foreign(agent),
            protocol=agent.protocol)
        client = AdapterClient(link, sid, _HeldHost(self), agent)
        policy = SecurityPolicy(workspace_dir="", autonomy=agent.autonomy)
        params = initialize_request(self.conn.client_capabilities, rt.implementation,
                                    policy).to_json()
        try:
            await client.start(self.conn.client_capabilities, rt.implementation, policy)
            for method, call in self.calls_for(agent.alias):
                await link.request(method, call, SETUP_TIMEOUT_SECS)
        except BaseException:
            link.abort()
            raise
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        answer.set_result(client.initialize_result)
        log.info("held_adapter_started", alias=agent.alias, lease_id=link.lease_id)
        return HeldAdapter(sid, agent, client, params, answer)

    def take(self, alias: str) -> HeldAdapter | None:
        """The held adapter, for a new session asking for ``alias`` ("": the default agent,
        as the held one is); None when there is none, or it is of another alias, or gone.
        A taken adapter is no longer held (the session's setup lets it go if it does not
        serve the session after all)."""
        held = self._held
        if held is None or (alias and held.agent.alias != alias) \
                or held.link.exit_info is not None:
            return None
        self._held = None
        return held

    def lost(self) -> None:
        """The held adapter exited or its stream broke."""
        held = self._held
        if held is not None and held.link.exit_info is not None:
            self._held = None

    def _drop(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.link.abort()  # its stream ends, and with it its lease

    async def close(self) -> None:
        """The connection ended: its calls are forgotten, the held adapter let go."""
        self._closed = True
        self._calls.clear()
        self._drop()
