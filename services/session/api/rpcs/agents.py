"""Session RPCs about agents and the store: status, alias chains, workspaces, policy,
and the capabilities each alias's adapter advertised."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.policy import SecurityPolicy, cap_policy
from services.common.protocol import MSG_UNKNOWN_AGENT
from services.session.api.convert import launch_to_pb, policy_to_pb, row_to_pb, status_to_pb
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.decisions.aliases import (
    AliasError,
    launch_in,
    launch_spec,
    resolve_alias,
    resolve_restore_alias,
    warm_launches,
)
from services.session.decisions.confinement import workspace_refusal
from services.session.decisions.lineage import effective_autonomy
from services.session.decisions.policy import policy_for
from services.session.decisions.workspace import (
    WorkspaceError,
    extra_root_refusal,
    new_session_places,
    resolve_additional_directories,
    resolve_workspace,
)
from services.session.store import InvalidItem, SessionRecord, StoreUnavailable

__all__ = ["AgentRpcs"]

log = get_logger("session.servicer")


def _workspace_failed(alias: str, exc: OSError) -> str:
    """The FAILED_PRECONDITION message when an agent workspace cannot be created."""
    return f"cannot create the workspace of agent {alias}: {exc.strerror or exc}"


class AgentRpcs(RpcBase):
    """GetStoreStatus, ResolveAgent, ResolveRestoreAgent, ResolveWorkspace, GetPolicy,
    ResolveNewSession, RecordAgentCapabilities, ListWarmAgents, ListAgents."""

    async def _launch(self, choose: Callable[[], str], context: Ctx) -> pb.ResolvedAgent:
        """The launch spec of the alias ``choose()`` picks (it raises AliasError to refuse)."""
        try:
            alias = choose()
            agent = launch_to_pb(await launch_spec(self._cfg, alias), self._seal_key)
            agent.adapter_capabilities_json = await self._recorded_capabilities(alias)
            return agent
        except AliasError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, _workspace_failed(alias, exc))

    async def _require_alias(self, alias: str, context: Ctx) -> None:
        if alias not in self._cfg.agents:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, MSG_UNKNOWN_AGENT.format(alias=alias)
            )

    async def GetStoreStatus(
        self, request: pb.GetStoreStatusRequest, context: Ctx
    ) -> pb.StoreStatus:
        """Persistent or in memory, and why (SPEC §2)."""
        return status_to_pb(self._store.status, self._claim_ttl_ms)

    async def ResolveAgent(
        self, request: pb.ResolveAgentRequest, context: Ctx
    ) -> pb.ResolvedAgent:
        """The SPEC §3 alias chain and dispatchability check."""
        return await self._launch(
            lambda: resolve_alias(self._cfg, request.explicit_alias, request.connection_default),
            context,
        )

    async def ResolveRestoreAgent(
        self, request: pb.ResolveRestoreAgentRequest, context: Ctx
    ) -> pb.ResolvedAgent:
        """The SPEC §8 restore chain for a stored session."""
        if not self._store.persistent:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session store is in memory ({self._store.status.fallback_reason}); "
                "sessions cannot be restored",
            )
        rec = await self._get(request.session_id, context)
        return await self._launch(lambda: resolve_restore_alias(self._cfg, rec.agent_alias), context)

    async def ResolveWorkspace(
        self, request: pb.ResolveWorkspaceRequest, context: Ctx
    ) -> pb.ResolvedWorkspace:
        """The SPEC §3 cwd rules."""
        await self._require_alias(request.alias, context)
        try:
            info = await resolve_workspace(self._cfg, request.alias, request.cwd, request.base_dir,
                                           local_user=request.local_user)
            extra = await resolve_additional_directories(
                self._cfg, request.additional_directories, request.base_dir, info.workspace_dir,
                local_user=request.local_user)
        except WorkspaceError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(
                context, grpc.StatusCode.FAILED_PRECONDITION, _workspace_failed(request.alias, exc)
            )
        return pb.ResolvedWorkspace(
            workspace_dir=info.workspace_dir, is_agent_workspace=info.is_agent_workspace,
            additional_directories=extra,
        )

    async def GetPolicy(self, request: pb.GetPolicyRequest, context: Ctx) -> pb.SecurityPolicy:
        """The SPEC §12 policy for an alias and a session workspace.

        Every session comes up through here, new or restored, so a workspace or an
        additional directory that must not be one (a stored row from before the rule,
        a config changed since) is refused here too, with the message session/new gives.
        With ``session_id`` the autonomy is capped by the session's stored ancestors.
        """
        await self._require_alias(request.alias, context)
        rec = await self._get(request.session_id, context) if request.session_id else None
        return policy_to_pb(await self._session_policy(
            request.alias, request.workspace_dir, request.additional_directories, rec, context,
            local_user=request.local_user))

    async def _session_policy(self, alias: str, workspace_dir: str, extra: Sequence[str],
                              rec: SessionRecord | None, context: Ctx, *,
                              local_user: bool) -> SecurityPolicy:
        """GetPolicy's decision for ``alias`` in ``workspace_dir`` with the roots ``extra``
        (INVALID_ARGUMENT when one may not be a root now, under the local user's rule when
        ``local_user``); with ``rec``, capped by the stored ancestors of that
        session (and of any session sharing them: a fork)."""
        if not workspace_dir:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, "workspace_dir is required"
            )
        refusal = await asyncio.to_thread(workspace_refusal, self._cfg, workspace_dir,
                                          local_user=local_user)
        if refusal is not None:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, refusal.message())
        roots = tuple(extra)
        for path in roots:  # stored roots (real paths) are confined as on the way in
            refused = await asyncio.to_thread(extra_root_refusal, self._cfg, path, path,
                                              local_user=local_user)
            if refused is not None:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(refused))
        policy = policy_for(self._cfg, alias, workspace_dir, roots)
        if rec is not None:  # a spawned session: never more autonomy than its ancestors
            policy = cap_policy(policy, await effective_autonomy(self._cfg, self._store, rec,
                                                                 alias))
        return policy

    async def ResolveNewSession(
        self, request: pb.ResolveNewSessionRequest, context: Ctx
    ) -> pb.ResolvedNewSession:
        """session/new's ResolveAgent, ResolveWorkspace and GetPolicy in one round trip, each
        deciding as on its own (the first refusal is the answer). Their file-system work is
        one thread hop beside the capabilities read, and each root is confined once, not
        once by the workspace rules and again by the policy (bench/PROFILE.md). With
        ``create``, the row is written once all three are decided (bench/PROFILE.md)."""
        try:
            alias = resolve_alias(self._cfg, request.agent.explicit_alias,
                                  request.agent.connection_default)
        except AliasError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        try:
            (agent_workspace, info, extra), capabilities = await asyncio.gather(
                asyncio.to_thread(new_session_places, self._cfg, alias, request.cwd,
                                  request.base_dir, list(request.additional_directories),
                                  request.local_user),
                self._recorded_capabilities(alias))
        except WorkspaceError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, _workspace_failed(alias, exc))
        agent = launch_to_pb(launch_in(self._cfg, alias, agent_workspace), self._seal_key)
        agent.adapter_capabilities_json = capabilities
        policy = policy_for(self._cfg, alias, info.workspace_dir, extra)
        resolved = pb.ResolvedNewSession(
            agent=agent, policy=policy_to_pb(policy),
            workspace=pb.ResolvedWorkspace(workspace_dir=info.workspace_dir,
                                           is_agent_workspace=info.is_agent_workspace,
                                           additional_directories=extra))
        if request.HasField("create"):
            rec = await self._create_row(context, request.create, alias, info.workspace_dir, extra)
            resolved.row.CopyFrom(row_to_pb(rec))
        return resolved

    async def _recorded_capabilities(self, alias: str) -> str:
        """What the alias's adapter last advertised; "" while the database is unreachable:
        the record only refines initialize's advertising, so resolving the agent (which
        needs no database) must not fail for it."""
        try:
            return await self._store.get_agent_capabilities(alias)
        except StoreUnavailable as exc:
            log.warning("agent_capabilities_unavailable", alias=alias, reason=str(exc))
            return ""

    async def RecordAgentCapabilities(
        self, request: pb.RecordAgentCapabilitiesRequest, context: Ctx
    ) -> pb.RecordAgentCapabilitiesResponse:
        """Store what the alias's adapter advertised (read back by ResolveAgent)."""
        await self._require_alias(request.alias, context)
        try:
            await self._store.set_agent_capabilities(request.alias, request.capabilities_json)
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.RecordAgentCapabilitiesResponse()
    async def ListWarmAgents(
        self, request: pb.ListWarmAgentsRequest, context: Ctx
    ) -> pb.ListWarmAgentsResponse:
        """The dispatchable agents with ``warm`` above 0, resolved like ResolveAgent."""
        try:
            launches = await warm_launches(self._cfg)
        except OSError as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                        f"cannot create an agent workspace: {exc.strerror or exc}")
        return pb.ListWarmAgentsResponse(agents=[launch_to_pb(x, self._seal_key) for x in launches])

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: Ctx
    ) -> pb.ListAgentsResponse:
        """The dispatchable agents as a client may see them (alias, kind, description,
        model: no command, environment, key or path) and the alias a session/new without
        one resolves to ("" when it would be refused)."""
        agents = [pb.AgentSummary(alias=alias, kind=a.kind, description=a.description,
                                  default_model=a.default_model)
                  for alias, a in self._cfg.agents.items() if a.dispatchable]
        try:
            default = resolve_alias(self._cfg, connection_default=request.connection_default)
        except AliasError:
            default = ""
        return pb.ListAgentsResponse(agents=agents, default_alias=default)
