"""The edge as the standard ACP v1 client of one adapter (docs/contracts.md).

One adapter process serves one edge session. :class:`AdapterClient` performs
the handshake (advertising what will be honoured: :mod:`services.edge.adapter.caps`),
opens or restores the adapter's session, sends prompts as ContentBlock arrays
and ``session/cancel`` as a notification, and rewrites session ids both ways:
the client only ever sees the edge's id, the adapter only ever its own.

Only the built-in agent gets acpgate's ``_meta.acpgate`` (its policy, its
history): an external adapter (``kind = "acp"``) gets plain ACP. An external
adapter that answers ``session/new`` with "authentication required" is
authenticated once with the first advertised ``env_var`` method whose
variables are set, then asked again.

Adapter-originated requests go to an :class:`AdapterHost` (the edge session):
``session/request_permission`` and ``elicitation/create`` are relayed to the
client (at most ``MAX_OPEN_QUESTIONS`` open at once: past it one is answered at once as
cancelled, reason ``too_many_open``, with a counted warning); ``fs/*`` and ``terminal/*`` are decided by the session service and
relayed or served (:mod:`services.edge.adapter.client_methods`); any other method is
the host's to serve (the session tools' extension methods) or to
pass on to the client. The handshake advertises the session tools'
methods as ``clientCapabilities._meta.acpgate.sessionTools``. Of the adapter's
notifications, ``session/update`` reaches the client, ``$/cancel_request``
withdraws one of the adapter's own pending requests, and any other goes to the
host to pass on. A request or notification naming a session id other than the
adapter's own is not its session's: refused (a request, -32000) or dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, Sequence
from typing import Any, Protocol

from services.common.acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
)
from services.common.jsonrpc import JsonRpcError
from services.common.logs import CountedWarning, get_logger
from services.common.mcp_policy import ClientMcpRules
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    AUTH_REQUIRED,
    CANCEL_REASON_TOO_MANY,
    M_AUTHENTICATE,
    M_CANCEL_REQUEST,
    M_ELICITATION_CREATE,
    M_HISTORY_APPEND,
    M_INITIALIZE,
    M_REQUEST_PERMISSION,
    M_SESSION_CANCEL,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    M_SESSION_RESUME,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    M_SESSION_SET_MODEL,
    M_SESSION_UPDATE,
    MAX_OPEN_QUESTIONS,
    META_ACPGATE,
    META_AUTONOMY_CAP,
    META_HISTORY_FOLLOWS,
    META_POLICY,
    U_AGENT_MESSAGE,
    U_AGENT_THOUGHT,
    U_AVAILABLE_COMMANDS,
    U_TOOL_CALL,
)
from services.edge.adapter.auto_login import auto_login_method
from services.edge.adapter.caps import agent_warnings, read_initialize_result
from services.edge.adapter.client_methods import CLIENT_METHODS
from services.edge.adapter.link import AdapterExit, AdapterLink, LineFeed
from services.edge.adapter.relay_lines import RelayedUpdate, UpdateLines
from services.edge.adapter.requests import (
    client_mcp_meta,
    initialize_request,
    setup_params,
)
from services.edge.backends.session_types import ResolvedAgent
from services.edge.errors import not_found
from services.edge.ports.permission import cancelled_answer

log = get_logger("edge.adapter")
#: Replayed updates that show an agent's load brought back its side of the conversation.
_OWN_SIDE = frozenset({U_AGENT_MESSAGE, U_AGENT_THOUGHT, U_TOOL_CALL})

#: How long the handshake and session setup may take (adapters can be slow to boot).
SETUP_TIMEOUT_SECS = 60.0


class AdapterHost(Protocol):
    """The edge session an adapter reports to."""

    async def on_adapter_updates(self, updates: list[dict[str, Any]]) -> None:
        """Consecutive ``session/update`` params from the adapter, ``sessionId`` already rewritten."""

    async def on_adapter_update_lines(self, updates: Sequence[RelayedUpdate],
                                      lines: list[str]) -> None:
        """Consecutive ``session/update`` messages as their ``update`` objects (or a text
        chunk's text) and their lines for the client, already with the edge's session id."""

    async def relay_to_client(self, method: str, params: dict[str, Any]) -> Any:
        """Re-issue an adapter request to the client; return the answer for the adapter."""

    async def client_method(self, method: str, params: dict[str, Any]) -> Any:
        """An ``fs/*`` or ``terminal/*`` request: decide, then relay or serve."""

    async def notify_client(self, method: str, params: dict[str, Any]) -> None:
        """Pass an adapter notification on to the client (``elicitation/complete``)."""

    async def serve_adapter_request(self, method: str, params: dict[str, Any]) -> Any:
        """An adapter request the edge answers itself; raise JsonRpcError (-32601) if none."""

    def on_adapter_exit(self, exit_info: AdapterExit) -> None:
        """The adapter's stream ended."""


class AdapterClient:
    """ACP client of one adapter, speaking through an :class:`AdapterLink` (begun already,
    or begun by :meth:`start`)."""

    def __init__(
        self,
        link: AdapterLink,
        edge_session_id: str,
        host: AdapterHost,
        agent: ResolvedAgent,
    ) -> None:
        self.edge_session_id = edge_session_id
        self._adapter_session_id = ""
        #: What the adapter advertised in its initialize result.
        self.agent_capabilities = AgentCapabilities()
        #: The ``authMethods`` it advertised (ACP ``AuthMethod`` objects, as sent).
        self.auth_methods: list[Any] = []
        #: The adapter's ``agentInfo.name`` ("" when it sent none).
        self.agent_name = ""
        #: Its ``initialize`` result as it sent it (what the edge advertises is built on it).
        self.initialize_result: Any = None
        #: The built-in agent speaks acpgate's ``_meta`` and keeps SPEC §4 prompts.
        self.builtin = agent.kind == AGENT_KIND_BUILTIN
        self.alias = agent.alias
        self._env = dict(agent.env)
        self._pass_env = tuple(agent.pass_env)
        self._authenticated = False
        #: The adapter's result of the session/new, load or resume that set its session up.
        self.setup_result: Any = None
        #: An external adapter restored its own session (its load/resume set it up:
        #: :func:`services.edge.sessions.seeding.restore_external`).
        self.restored_itself = False
        self._host = host
        #: While True, the adapter's own history replay (session/load) is dropped.
        self._suppress_updates = False
        #: That replay held some of the agent's side of the conversation (``_OWN_SIDE``).
        self.replayed_own = False
        #: The agent's session ids of restores given up (``seeding.restore_external``): a
        #: replay of theirs arriving after the answer is no client's, so it is dropped.
        self.abandoned_sessions: set[str] = set()
        self._update_lines = UpdateLines()
        #: The agent's questions relayed and not answered yet (bounded).
        self._open_questions = 0
        self._too_many = CountedWarning(log, "agent_questions_over_limit",
                                        session_id=edge_session_id, limit=MAX_OPEN_QUESTIONS)
        self.link = link
        link.bind(self)

    @property
    def adapter_session_id(self) -> str:
        """The adapter's own id of the session ("" until its setup answered)."""
        return self._adapter_session_id

    @adapter_session_id.setter
    def adapter_session_id(self, value: str) -> None:
        self._adapter_session_id = value
        if self.link.v2 is not None:  # a v2 agent's child messages may name it
            self.link.v2.wire.bind(value, self.edge_session_id)

    # ------------------------------------------------------------------ AdapterPeer

    async def on_adapter_lines(self, lines: Sequence[str], feed: LineFeed) -> None:
        """Relay the ``session/update`` lines of the compact shape straight to the host
        (:mod:`services.edge.adapter.relay_lines`); every other line goes through ``feed``."""
        if self._suppress_updates or self.link.speaks_v2:  # a v2 agent's are translated
            await feed(list(lines))
            return
        await self._update_lines.relay(lines, self.adapter_session_id, self.edge_session_id,
                                       self._host.on_adapter_update_lines, feed,
                                       screen=self.link.foreign)

    async def on_adapter_notifications(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        """Rewrite and hand the ``session/update`` ones to the host; others are ignored."""
        if self._suppress_updates:  # a load's replay: did it hold the agent's side?
            self.replayed_own = self.replayed_own or any(
                method == M_SESSION_UPDATE and isinstance(params.get("update"), dict)
                and params["update"].get("sessionUpdate") in _OWN_SIDE for method, params in batch)
            # Its commands are the restored session's, not history: the client gets them.
            batch = [(method, params) for method, params in batch if method == M_SESSION_UPDATE
                     and isinstance(params.get("update"), dict)
                     and params["update"].get("sessionUpdate") == U_AVAILABLE_COMMANDS]
            if not batch:
                return
        edge_id = self.edge_session_id
        updates: list[dict[str, Any]] = []
        for method, params in batch:
            if method == M_SESSION_UPDATE:
                if params.get("sessionId") in self.abandoned_sessions:
                    continue  # a late replay of a restore given up (gemini-cli 0.61)
                params["sessionId"] = edge_id
                updates.append(params)
                continue
            if updates:  # keep the stream's order around the other notifications
                await self._host.on_adapter_updates(updates)
                updates = []
            if method == M_CANCEL_REQUEST:
                self.link.cancel_inbound(params.get("requestId"))
            elif "sessionId" not in params:
                await self._host.notify_client(method, params)
            elif params["sessionId"] == self.adapter_session_id and self.adapter_session_id:
                params["sessionId"] = edge_id  # its own session's; another's is dropped
                await self._host.notify_client(method, params)
        if updates:
            await self._host.on_adapter_updates(updates)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The configured environment values of the agent (scrubbed from its stderr)."""
        return tuple(self._env.values())

    async def on_adapter_request(self, method: str, params: dict[str, Any]) -> Any:
        """Relay permission/elicitation, decide fs/terminal; the host serves (or refuses)
        the rest."""
        if method in CLIENT_METHODS:
            if "sessionId" in params:
                params["sessionId"] = self.edge_session_id
            return await self._host.client_method(method, params)
        if method in (M_REQUEST_PERMISSION, M_ELICITATION_CREATE):
            if "sessionId" in params:
                params["sessionId"] = self.edge_session_id
            if self._open_questions >= MAX_OPEN_QUESTIONS:
                self._too_many(method=method)
                return ({"action": "cancel"} if method == M_ELICITATION_CREATE
                        else cancelled_answer(CANCEL_REASON_TOO_MANY))
            self._open_questions += 1
            try:
                return await self._host.relay_to_client(method, params)
            finally:
                self._open_questions -= 1
        if "sessionId" in params:
            if params["sessionId"] != self.adapter_session_id:  # not its own session
                raise not_found(str(params["sessionId"]))
            params["sessionId"] = self.edge_session_id
        return await self._host.serve_adapter_request(method, params)

    def on_adapter_exit(self, exit_info: AdapterExit) -> None:
        """Forward the exit to the host."""
        self._host.on_adapter_exit(exit_info)

    # ------------------------------------------------------------------ setup

    async def start(self, client: ClientCapabilities, client_info: Implementation,
                    policy: SecurityPolicy, sent: asyncio.Future[Any] | None = None) -> None:
        """Attach (ensuring the lease first when the link was opened with ``ensure``) and run
        ``initialize`` as ``client_info`` (the edge's ACP ``Implementation``), promising what
        the client and the edge will honour under ``policy``.

        ``initialize`` is sent right behind the stream's ``open`` (one round trip to the
        lifecycle service less) — or was already, and ``sent`` is its answer to come (the
        caller checked it was this very request); an attach that fails is still the error
        raised.
        """
        if not self.link.begun:
            self.link.begin()
        pending = sent if sent is not None else asyncio.ensure_future(self.link.request(
            M_INITIALIZE, initialize_request(client, client_info, policy).to_json(),
            SETUP_TIMEOUT_SECS))
        try:
            await self.link.attached(SETUP_TIMEOUT_SECS)
        except BaseException:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
            raise
        self.initialize_result = await pending
        answer = read_initialize_result(self.initialize_result)
        self.agent_capabilities = answer.agent_capabilities
        self.auth_methods = list(answer.auth_methods)
        self.agent_name = answer.agent_info.name if answer.agent_info is not None else ""
        if self.builtin:  # what the built-in agent found wrong with its config
            for warning in agent_warnings(answer):
                log.warning("agent_warning", session_id=self.edge_session_id, alias=self.alias,
                            warning=warning)

    def _meta(self, **ours: Any) -> dict[str, Any]:
        """``{"_meta": {"acpgate": ours}}`` for the built-in agent; nothing for others."""
        return {"_meta": {META_ACPGATE: ours}} if self.builtin else {}

    async def new_session(self, cwd: str, mcp_servers: list[Any], policy: SecurityPolicy,
                          additional_directories: list[str] | None = None,
                          client_mcp: ClientMcpRules | None = None,
                          extra: dict[str, Any] | None = None) -> str:
        """``session/new`` with the workspace as cwd; returns the adapter's session id.

        ``client_mcp``: how the client's ``mcpServers`` run (the built-in agent's
        ``_meta.acpgate.clientMcp``; without it the agent applies the strictest rules).
        ``extra``: the client's other params, passed to an external agent as they came.
        """
        params = {} if self.builtin or not extra else dict(extra)
        params.update(setup_params(None, cwd, mcp_servers, additional_directories))
        params.update(self._meta(**{META_POLICY: policy.to_json(),
                                    **client_mcp_meta(client_mcp)}))
        result = await self.setup_request(M_SESSION_NEW, params)
        sid = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(sid, str) or not sid:
            raise ValueError("adapter's session/new result has no sessionId")
        self.adapter_session_id = sid
        self.abandoned_sessions.discard(sid)
        self.setup_result = result
        return sid

    async def setup_request(self, method: str, params: dict[str, Any]) -> Any:
        """A setup request; on "authentication required", authenticate once and ask again."""
        try:
            return await self.link.request(method, params, SETUP_TIMEOUT_SECS)
        except JsonRpcError as exc:
            if exc.code != AUTH_REQUIRED or self._authenticated or not await self._authenticate():
                raise
        return await self.link.request(method, params, SETUP_TIMEOUT_SECS)

    async def _authenticate(self) -> bool:
        """``authenticate`` with an advertised method whose key variables are set in the
        adapter's environment (:mod:`services.edge.adapter.auto_login`): its id alone."""
        method_id = auto_login_method(self.auth_methods, self.agent_name, self._env,
                                      self._pass_env)
        if not method_id:
            return False
        self._authenticated = True
        log.info("adapter_authenticate", alias=self.alias, method_id=method_id)
        await self.link.request(M_AUTHENTICATE, {"methodId": method_id}, SETUP_TIMEOUT_SECS)
        return True

    async def resume_builtin(self, adapter_session_id: str, cwd: str, mcp_servers: list[Any],
                             policy: SecurityPolicy,
                             history: AsyncIterable[list[dict[str, Any]]],
                             additional_directories: list[str] | None = None,
                             client_mcp: ClientMcpRules | None = None) -> None:
        """Seed the built-in agent: ``session/resume`` with ``_meta.acpgate.historyFollows``
        (and ``clientMcp``, as :meth:`new_session`), then each chunk of ``history`` as one
        ``_acpgate/history_append`` request, answered before the next goes (the agent keeps
        up; neither side holds the whole history), the last one ``done``."""
        params = setup_params(adapter_session_id, cwd, mcp_servers, additional_directories)
        params["_meta"] = {META_ACPGATE: {META_POLICY: policy.to_json(),
                                          META_HISTORY_FOLLOWS: True,
                                          **client_mcp_meta(client_mcp)}}
        self.setup_result = await self.quiet_request(M_SESSION_RESUME, params)
        async for items in history:
            await self.link.request(M_HISTORY_APPEND, {
                "sessionId": adapter_session_id, "items": items}, SETUP_TIMEOUT_SECS)
        await self.link.request(M_HISTORY_APPEND, {
            "sessionId": adapter_session_id, "items": [], "done": True}, SETUP_TIMEOUT_SECS)
        self.adapter_session_id = adapter_session_id

    async def quiet_request(self, method: str, params: dict[str, Any]) -> Any:
        """A restore request (:meth:`setup_request`) whose own updates are dropped: the edge
        replays from the store. :attr:`replayed_own` then tells whether they held any of
        the agent's side of a conversation (a load's replay should)."""
        self._suppress_updates = True
        self.replayed_own = False
        try:
            return await self.setup_request(method, params)
        finally:
            self._suppress_updates = False

    # ------------------------------------------------------------------ turns

    async def prompt(self, blocks: list[dict[str, Any]], autonomy_cap: str = "",
                     extra: dict[str, Any] | None = None) -> Any:
        """``session/prompt`` with a ContentBlock array; returns the adapter's result as it
        sent it (``read_prompt_result`` reads it). ``extra``: the client's other params
        (its ``_meta``, fields of later ACP versions), passed to an external agent as they
        came. ``autonomy_cap`` ("" = none) caps this turn's autonomy: the built-in agent
        gets it as ``_meta.acpgate.autonomyCap``; an external agent cannot be
        capped (the session service refuses such a turn before it gets here)."""
        params: dict[str, Any] = {} if self.builtin or not extra else dict(extra)
        params.update({"sessionId": self.adapter_session_id, "prompt": blocks})
        if autonomy_cap:
            params.update(self._meta(**{META_AUTONOMY_CAP: autonomy_cap}))
        return await self.link.request(M_SESSION_PROMPT, params)

    async def set_mode(self, mode_id: str) -> Any:
        """``session/set_mode`` on the adapter's session; its result."""
        return await self.link.request(M_SESSION_SET_MODE, {
            "sessionId": self.adapter_session_id, "modeId": mode_id}, SETUP_TIMEOUT_SECS)

    async def set_config_option(self, config_id: str, value: str | bool) -> Any:
        """``session/set_config_option`` (a boolean is sent with ``type: "boolean"``)."""
        params: dict[str, Any] = {"sessionId": self.adapter_session_id, "configId": config_id}
        if isinstance(value, bool):
            params["type"] = "boolean"
        params["value"] = value
        return await self.link.request(M_SESSION_SET_CONFIG_OPTION, params, SETUP_TIMEOUT_SECS)

    async def set_model(self, model_id: str) -> Any:
        """``session/set_model`` (ACP unstable) on the adapter's session; its result."""
        return await self.link.request(M_SESSION_SET_MODEL, {
            "sessionId": self.adapter_session_id, "modelId": model_id}, SETUP_TIMEOUT_SECS)

    def cancel(self) -> None:
        """``session/cancel`` as a notification (never reaps anything)."""
        self.link.notify(M_SESSION_CANCEL, {"sessionId": self.adapter_session_id})

    async def close(self) -> None:
        """Detach (stdin EOF); the lifecycle service reaps the process."""
        await self.link.close()
