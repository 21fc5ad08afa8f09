"""Agent-to-agent session RPCs: spawn a child session, send to a session.

``SpawnSession`` decides everything about a child (:mod:`services.session.decisions.lineage`):
its agent, its workspace inside the requester's, its policy with autonomy at
most the requester's chain's, and its ownership (spawnedBy and parentSessionKey
= the requester's key, ownerSessionKey = the requester's owner); it writes the
row, claimed by the spawning instance. ``SendToSession`` is the SPEC §14 "send"
check plus its record: the target's activity is bumped. The turn itself is the
edge's to run (this service never speaks ACP); the edge stores it like any turn.

Both act for the requesting *session* (never a principal, never the operator)
and never cross principals: a send to another principal's session is NOT_FOUND
like a missing row, whatever grant the principal holds. A turn one
session starts in another runs at most at the sender's acting autonomy
(:func:`services.session.decisions.lineage.acting_autonomy`): SendToSession answers that
cap for the edge to pass to a built-in target, and refuses a target on an
external agent above it — acpgate cannot cap an external agent's turn. For the
same reason SpawnSession refuses an external alias configured above it.
"""

from __future__ import annotations

import dataclasses

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.policy import autonomy_above, cap_policy, lower_autonomy
from services.common.protocol import (
    AGENT_KIND_BUILTIN,
    MSG_SEND_ABOVE_AUTONOMY,
    MSG_SEND_REQUESTER,
    MSG_SPAWN_ABOVE_AUTONOMY,
    MSG_SPAWN_AGENT_REQUIRED,
    MSG_SPAWN_UNKNOWN_REQUESTER,
)
from services.session.api.convert import launch_to_pb, policy_to_pb, row_to_pb
from services.session.api.rpcs.base import Ctx
from services.session.api.rpcs.reads import ReadRpcs
from services.session.api.rpcs.rows import RowRpcs
from services.session.decisions.aliases import (
    AliasError,
    launch_spec,
    resolve_alias,
    resolve_restore_alias,
)
from services.session.decisions.lineage import acting_autonomy, child_workspace, effective_autonomy
from services.session.decisions.policy import policy_for
from services.session.decisions.workspace import WorkspaceError
from services.session.store import NewSession, SessionNotFound, SessionRecord

__all__ = ["A2aRpcs"]

log = get_logger("session.servicer")


class A2aRpcs(RowRpcs, ReadRpcs):
    """SpawnSession and SendToSession."""

    async def SpawnSession(
        self, request: pb.SpawnSessionRequest, context: Ctx
    ) -> pb.SpawnSessionResponse:
        """A child session of ``agent_alias``, owned by the requesting session."""
        key = request.requester_session_key
        parent = await self._store.find_by_session_key(key) if key else None
        if parent is None:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                        MSG_SPAWN_UNKNOWN_REQUESTER)
        if not request.session_id:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "session_id is required")
        alias = request.agent_alias.strip()
        try:
            if not alias:
                raise AliasError(MSG_SPAWN_AGENT_REQUIRED)
            resolve_alias(self._cfg, alias)  # configured and dispatchable, or the SPEC message
            launch = await launch_spec(self._cfg, alias)
            workspace = await child_workspace(self._cfg, alias, parent.workspace_dir, request.cwd,
                                              local_user=request.local_user)
        except (AliasError, WorkspaceError) as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                        f"cannot prepare agent {alias}: {exc.strerror or exc}")
        # Never above the requester's ceiling, the mode it runs in now, or its turn's cap.
        acting = await acting_autonomy(self._cfg, self._store, parent, request.requester_turn_cap)
        configured = self._cfg.agent_autonomy(alias)
        if not self._builtin(alias) and autonomy_above(configured, acting):
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, MSG_SPAWN_ABOVE_AUTONOMY.format(
                agent=alias, target=configured, sender=acting))
        policy = cap_policy(policy_for(self._cfg, alias, workspace),
                            lower_autonomy(configured, acting))
        owner = parent.ownership.owner_session_key or parent.ownership.session_key
        rec = await self._create(context, NewSession(
            request.session_id, alias, workspace,
            gateway_instance_id=request.gateway_instance_id, host=request.host,
            public_url=request.public_url,
            title=request.label, spawned_by=key, parent_session_key=key,
            owner_session_key=owner))
        log.info("session_spawned", session_id=rec.session_id, agent=alias,
                 parent_session_id=parent.session_id, autonomy=policy.autonomy)
        return pb.SpawnSessionResponse(
            session=row_to_pb(rec),
            agent=launch_to_pb(dataclasses.replace(launch, autonomy=policy.autonomy),
                               self._seal_key),
            policy=policy_to_pb(policy))

    async def SendToSession(
        self, request: pb.SendToSessionRequest, context: Ctx
    ) -> pb.SendToSessionResponse:
        """The "send" check (a hidden row is NOT_FOUND like a missing one), the sender's
        autonomy as the turn's cap (an external target above it is refused), recorded as
        activity of the target."""
        key = request.requester_session_key
        sender = await self._store.find_by_session_key(key) if key else None
        if sender is None:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_SEND_REQUESTER)
        # No see_all: a grant reads across principals, it never drives another's session.
        viewer = await self._viewer(key, request.visibility, context)
        rec = await self._visible(viewer, request.session_id, "send", context)
        cap = await acting_autonomy(self._cfg, self._store, sender, request.requester_turn_cap)
        alias = self._running_alias(rec)
        if not self._builtin(alias):
            level = await effective_autonomy(self._cfg, self._store, rec, alias)
            if autonomy_above(level, cap):
                log.info("session_send_refused", session_id=rec.session_id, agent=alias,
                         autonomy=level, cap=cap)
                await abort(context, grpc.StatusCode.PERMISSION_DENIED,
                            MSG_SEND_ABOVE_AUTONOMY.format(session_id=rec.session_id,
                                                           agent=alias, target=level, sender=cap))
        try:
            rec = await self._store.touch(rec.session_id)
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        log.info("session_send", session_id=rec.session_id, requester=key, cap=cap)
        return pb.SendToSessionResponse(session=row_to_pb(rec), autonomy_cap=cap)

    def _builtin(self, alias: str) -> bool:
        """Whether ``alias`` runs the built-in agent (which caps a turn itself)."""
        agent = self._cfg.agents.get(alias)
        return agent is not None and agent.kind == AGENT_KIND_BUILTIN

    def _running_alias(self, rec: SessionRecord) -> str:
        """The alias a send's turn runs on: the session's own while it runs, else the one
        the edge will restore it onto (SPEC §8's chain; the stored one if none qualifies:
        the restore then fails anyway)."""
        if rec.state == "active":
            return rec.agent_alias
        try:
            return resolve_restore_alias(self._cfg, rec.agent_alias)
        except AliasError:
            return rec.agent_alias
