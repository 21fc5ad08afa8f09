"""The ACP methods of the built-in agent (agent side of ACP v1).

``initialize`` (:mod:`services.agent.handshake`), ``authenticate``, ``session/new``, ``session/load``,
``session/resume``, ``session/prompt``, ``session/cancel``, ``session/close``,
``session/set_mode`` (autonomy levels) and ``session/set_config_option`` (model),
see :mod:`services.agent.modes`.
Session state lives only in this process: the edge restores a session by ``session/resume``
with ``_meta.acpgate.historyFollows``, then the history in ``_acpgate/history_append`` chunks
(older edges: all of it in ``_meta.acpgate.history``). Without either only known ids can be
resumed or loaded; an unknown id is "Session not found", never silently an empty session.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from services.agent import modes
from services.agent.approval import ApprovalGate
from services.agent.commands import CommandAdvertiser
from services.agent.handshake import initialize_result, read_client_offer
from services.agent.history import HistorySeed, replay_updates, seed_messages
from services.agent.mcp import Launch, SessionMcp
from services.agent.mcp.launch import ClientGuard, Planned
from services.agent.mcp.plan import approver, client_rules, planned_servers
from services.agent.params import acpgate_meta, first, shell_environment
from services.agent.policy_source import LocalPolicy, PolicySource
from services.agent.prompt import build_system_prompt
from services.agent.prompt_input import prompt_text
from services.agent.providers.base import Provider, ProviderError, provider_warnings
from services.agent.restoring import Restoring
from services.agent.sandbox import landlock_abi
from services.agent.session import AgentSession
from services.agent.tools import all_tools
from services.agent.tools.base import ToolContext
from services.agent.turn import TurnRunner, TurnUsage
from services.common.acp.schema import PromptResponse
from services.common.config import AgentSection, Config
from services.common.jsonrpc import JsonRpcError, JsonRpcPeer
from services.common.logs import get_logger
from services.common.net_targets import Resolver, system_resolver
from services.common.policy import SecurityPolicy
from services.common.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    M_AUTHENTICATE,
    M_HISTORY_APPEND,
    M_INITIALIZE,
    M_SESSION_CANCEL,
    M_SESSION_CLOSE,
    M_SESSION_LOAD,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    M_SESSION_RESUME,
    M_SESSION_SET_CONFIG_OPTION,
    M_SESSION_SET_MODE,
    M_SESSION_UPDATE,
    META_AUTONOMY_CAP,
    META_HISTORY,
    META_HISTORY_FOLLOWS,
    META_POLICY,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
    MSG_MISSING_SESSION_ID,
    MSG_NO_HISTORY_EXPECTED,
    MSG_SESSION_BUSY,
    MSG_SESSION_NOT_FOUND,
    SESSION_BUSY,
    SESSION_NOT_FOUND,
    STOP_CANCELLED,
)

log = get_logger("agent.server")


class AgentServer:
    """Serves one ACP connection for one configured agent alias.

    ``version`` is the ``agentInfo.version`` it reports, given by the entry point.
    ``local_policy`` is set only when the agent runs standalone (see
    :mod:`services.agent.policy_source`); behind the edge it stays ``None`` and a
    session without ``_meta.acpgate.policy`` is refused. ``landlock`` probes the
    kernel's Landlock ABI and ``resolve`` resolves host names for a gateway
    client's MCP servers (both injectable for tests).
    """

    def __init__(self, cfg: Config, alias: str, agent: AgentSection, provider: Provider,
                 *, version: str, local_policy: LocalPolicy | None = None,
                 environ: Mapping[str, str] | None = None,
                 provider_for: Callable[[str], Provider] | None = None,
                 landlock: Callable[[], int] = landlock_abi,
                 resolve: Resolver = system_resolver) -> None:
        self._cfg = cfg
        self._alias = alias
        self._agent = agent
        self._provider = provider
        #: The models a session may switch to, and a provider for each one in use.
        self._models = modes.models_of(agent) or [agent.model]
        self._providers: dict[str, Provider] = {self._models[0]: provider}
        self._provider_for = provider_for
        self._version = version
        self._policies = PolicySource(cfg, alias, local_policy)
        self._standalone = local_policy is not None
        self._landlock = landlock
        self._resolve = resolve
        self._shell_env = shell_environment(cfg, os.environ if environ is None else environ)
        self._sessions: dict[str, AgentSession] = {}
        #: Restores in progress: requests for that id wait for them (pipelined clients).
        self._restoring = Restoring()
        self._commands = CommandAdvertiser()
        self._elicitation = False
        #: The client (the acpgate edge) serves the session tools' extension methods.
        self._session_tools = False
        #: Input ended: prompts that were read but not yet started are answered ``cancelled``.
        self._closing = False
        self._peer: JsonRpcPeer | None = None
        self._runner = TurnRunner(
            provider=self._session_provider,
            tools=all_tools(),
            max_tool_iterations=agent.max_tool_iterations,
            context_budget_chars=agent.context_budget_chars,
            system_prompt=self._system_prompt,
        )

    def attach(self, peer: JsonRpcPeer) -> None:
        """Bind the connection this server answers on."""
        self._peer = peer

    @property
    def peer(self) -> JsonRpcPeer:
        """The attached connection."""
        if self._peer is None:
            raise RuntimeError("AgentServer used before attach()")
        return self._peer

    async def cancel_turns(self) -> None:
        """Cancel every running turn (killing its tools); their prompts answer ``cancelled``.

        From now on no new turn starts: a prompt still in flight answers ``cancelled``.
        """
        self._closing = True
        turns = [s.turn for s in self._sessions.values() if s.turn is not None and s.busy]
        for turn in turns:
            turn.cancel()
        if turns:
            await asyncio.wait(turns, timeout=5)

    async def shutdown(self) -> None:
        """Cancel running turns, stop every session's MCP servers, release the providers."""
        await self.cancel_turns()
        await asyncio.gather(*(s.mcp.close() for s in self._sessions.values()))
        for provider in self._providers.values():
            await provider.aclose()

    def _session_provider(self, session: AgentSession) -> Provider:
        """The provider of the session's model (made on first use; the default without
        a factory, as in tests)."""
        provider = self._providers.get(session.model)
        if provider is None:
            provider = self._provider_for(session.model) if self._provider_for else self._provider
            self._providers[session.model] = provider
        return provider

    async def _system_prompt(self, policy: SecurityPolicy, mcp_notes: Sequence[str]) -> str:
        # The agents sessions_spawn can start, when the client serves the session tools.
        agents = [f"{a.alias} ({a.kind})" for a in self._cfg.agents.values()
                  if a.dispatchable] if self._session_tools else []
        return await asyncio.to_thread(build_system_prompt, self._alias,
                                       self._cfg.agent_workspace(self._alias), policy, mcp_notes,
                                       agents)

    # ------------------------------------------------------------------ dispatch

    async def __call__(self, method: str, params: dict[str, Any], notification: bool) -> Any:
        """Route one inbound call."""
        if method == M_SESSION_CANCEL:
            return self._cancel(params)
        if method == M_INITIALIZE:
            return self._initialize(params)
        if method == M_AUTHENTICATE:
            return {}
        if method == M_SESSION_NEW:
            return await self._new(params)
        if method == M_SESSION_RESUME:
            return await self._restore(params, replay=False)
        if method == M_SESSION_LOAD:
            return await self._restore(params, replay=True)
        if method == M_SESSION_PROMPT:
            return await self._prompt(params)
        if method == M_SESSION_CLOSE:
            return await self._close(params)
        if method == M_SESSION_SET_MODE:
            return await self._set_mode(params)
        if method == M_SESSION_SET_CONFIG_OPTION:
            return await self._set_config_option(params)
        if method == M_HISTORY_APPEND:
            return await self._history_append(params)
        if notification:
            return None
        raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=method))

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        offer = read_client_offer(params)
        self._elicitation, self._session_tools = offer.elicitation, offer.session_tools
        return initialize_result(self._alias, self._version, provider_warnings(self._provider))

    # ------------------------------------------------------------------ sessions

    @staticmethod
    def _session_id(params: Mapping[str, Any]) -> str:
        sid = first(params, "sessionId", "session_id")
        if not isinstance(sid, str) or not sid.strip():
            raise JsonRpcError(INVALID_PARAMS, MSG_MISSING_SESSION_ID)
        return sid.strip()

    async def _get(self, sid: str) -> AgentSession:
        await self._restoring.wait(sid)
        session = self._sessions.get(sid)
        if session is None:
            raise JsonRpcError(SESSION_NOT_FOUND, MSG_SESSION_NOT_FOUND.format(session_id=sid))
        return session

    async def _policy(self, params: Mapping[str, Any]) -> SecurityPolicy:
        """The session's policy: ``_meta.acpgate.policy``, else (standalone only) local config."""
        return await self._policies.resolve(acpgate_meta(params).get(META_POLICY),
                                            first(params, "cwd", "workspaceDir", "workspace_dir"))

    def _create(self, sid: str, policy: SecurityPolicy) -> AgentSession:
        peer = self.peer

        async def send_update(update: dict[str, Any]) -> None:
            await peer.notify(M_SESSION_UPDATE, {"sessionId": sid, "update": update})

        timeout = float(self._cfg.acp.session_timeout_secs)
        context = ToolContext(
            session_id=sid, policy=policy, send_update=send_update,
            client_request=peer.request, elicitation=self._elicitation,
            session_tools=self._session_tools,
            request_timeout=timeout, shell_env=dict(self._shell_env),
            agent_workspace=str(self._cfg.agent_workspace(self._alias)),
        )
        gate = ApprovalGate(sid, peer.request, timeout)

        def current_policy() -> SecurityPolicy:
            return context.policy  # a set_mode changes it

        mcp = SessionMcp(Launch(
            session_id=sid, cwd=policy.workspace_dir, env=self._shell_env,
            startup_timeout=float(self._agent.mcp_startup_timeout_secs),
            call_timeout=float(self._agent.mcp_call_timeout_secs),
            client_version=self._version,
            guard=ClientGuard(policy=current_policy, approve=approver(gate, current_policy),
                              landlock=self._landlock, resolve=self._resolve),
        ))
        session = AgentSession(id=sid, policy=policy, context=context, mcp=mcp, gate=gate,
                               ceiling=policy, model=self._models[0])
        self._sessions[sid] = session
        log.info("session_created", session_id=sid, autonomy=policy.autonomy)
        return session

    def _mcp_specs(self, params: Mapping[str, Any]) -> tuple[list[Planned], list[str]]:
        """The operator's ``mcp_servers``, then the client's ``mcpServers`` under the rules
        the edge sent (refusals apart)."""
        rules = client_rules(acpgate_meta(params), standalone=self._standalone)
        return planned_servers(self._agent.mcp_servers, params.get("mcpServers"), rules)

    async def _new(self, params: dict[str, Any]) -> dict[str, Any]:
        policy = await self._policy(params)
        session = self._create(str(uuid.uuid4()), policy)
        await session.mcp.start(*self._mcp_specs(params))
        self._commands.after_answer(session, self._session_provider(session))
        return {"sessionId": session.id, **self._state(session)}

    def _state(self, session: AgentSession) -> dict[str, Any]:
        return modes.session_state(session, self._models)

    async def _set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        return await modes.set_mode(await self._get(self._session_id(params)), params)

    async def _set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        session = await self._get(self._session_id(params))
        return modes.set_config_option(session, self._models, params)

    async def _restore(self, params: dict[str, Any], *, replay: bool) -> dict[str, Any]:
        """``session/resume`` / ``session/load`` of a known id, or of an unknown id seeded
        from ``_meta.acpgate.history`` (the edge's restore path; ``[]`` = no turns yet).

        An unknown id without that history is -32000 ``Session not found``: this
        process keeps no store, and an empty session would pass for the real one.

        Requests for the same id that arrive meanwhile wait until it is done.
        """
        sid = self._session_id(params)
        async with self._restoring.exclusive(sid):
            return await self._restore_now(sid, params, replay=replay)

    async def _restore_now(self, sid: str, params: dict[str, Any], *,
                           replay: bool) -> dict[str, Any]:
        session = self._sessions.get(sid)
        meta = acpgate_meta(params)
        history = meta.get(META_HISTORY)
        follows = meta.get(META_HISTORY_FOLLOWS) is True
        if history is not None and not isinstance(history, list):
            raise JsonRpcError(INVALID_PARAMS, "Invalid _meta.acpgate.history: must be an array")
        budget = self._agent.context_budget_chars
        if session is None:
            if history is None and not follows:
                raise JsonRpcError(SESSION_NOT_FOUND, MSG_SESSION_NOT_FOUND.format(session_id=sid))
            session = self._create(sid, await self._policy(params))
            session.messages = seed_messages(history or [], budget)
            session.call_ids.update(c.id for m in session.messages for c in m.tool_calls)
            await session.mcp.start(*self._mcp_specs(params))
        elif not session.busy:
            if meta.get(META_POLICY) is not None:
                policy = await self._policy(params)
                session.ceiling = policy
                session.apply_policy(policy)
            servers = params.get("mcpServers")
            if servers is None:
                await session.mcp.restart_unready()
            else:
                await session.mcp.resume(*self._mcp_specs(params))
        if follows and not session.busy:  # the stored history replaces what this process had
            session.seed = HistorySeed(budget)
        if replay:
            session.seeded()
            for update in replay_updates(session.messages):
                await session.context.send_update(update)
        self._commands.after_answer(session, self._session_provider(session))
        return self._state(session)

    async def _history_append(self, params: dict[str, Any]) -> dict[str, Any]:
        """One chunk of the history a ``historyFollows`` restore announced (``done``: the last)."""
        session = await self._get(sid := self._session_id(params))
        if session.seed is None:
            raise JsonRpcError(INVALID_PARAMS, MSG_NO_HISTORY_EXPECTED.format(session_id=sid))
        items = params.get("items", [])
        if not isinstance(items, list):
            raise JsonRpcError(INVALID_PARAMS, "Invalid items: must be an array")
        session.seed.add(items)
        if params.get("done") is True:
            session.seeded()
        return {}

    async def _close(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = self._session_id(params)
        session = await self._get(sid)
        self._sessions.pop(sid, None)
        if session.turn is not None and session.busy:
            session.turn.cancel()
            await asyncio.wait({session.turn})
        await session.mcp.close()
        return {}

    def _cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = first(params, "sessionId", "session_id")
        session = self._sessions.get(sid) if isinstance(sid, str) else None
        if session is not None and session.turn is not None and session.busy:
            log.info("turn_cancel", session_id=session.id)
            session.turn.cancel()
        return {}

    # ------------------------------------------------------------------ prompt

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = self._session_id(params)
        session = await self._get(sid)
        if session.busy:
            raise JsonRpcError(SESSION_BUSY, MSG_SESSION_BUSY.format(session_id=sid))
        session.seeded()  # a seed the edge never closed ends at the first prompt
        text = prompt_text(params.get("prompt"))
        cap = modes.read_autonomy_cap(acpgate_meta(params).get(META_AUTONOMY_CAP))
        usage = TurnUsage()
        # No await between the busy check and claiming the slot.
        session.cap_turn(cap)
        turn = asyncio.create_task(self._runner.run(session, text, usage))
        session.turn = turn
        turn.add_done_callback(session.turn_ended)
        if self._closing:
            turn.cancel()
        try:
            await asyncio.wait({turn})
        except asyncio.CancelledError:
            turn.cancel()
            raise
        if turn.cancelled():
            return PromptResponse(stop_reason=STOP_CANCELLED, usage=usage.to_acp()).to_json()
        exc = turn.exception()
        if isinstance(exc, ProviderError):
            # The summary, not the message: a provider's error body may quote the prompt.
            log.warning("turn_failed", session_id=sid, error=exc.summary)
            raise JsonRpcError(INTERNAL_ERROR, str(exc))
        if exc is not None:
            log.error("turn_crashed", session_id=sid, error=type(exc).__name__)
            raise JsonRpcError(INTERNAL_ERROR, f"Internal error in the agent: {type(exc).__name__}")
        return PromptResponse(stop_reason=turn.result(), usage=usage.to_acp()).to_json()
