"""Agent-to-agent session RPCs (issue 13): spawn a child session, send to a session.

``SpawnSession`` decides everything about a child (:mod:`services.session.lineage`):
its agent, its workspace inside the requester's, its policy with autonomy at
most the requester's chain's, and its ownership (spawnedBy and parentSessionKey
= the requester's key, ownerSessionKey = the requester's owner); it writes the
row, claimed by the spawning instance. ``SendToSession`` is the SPEC §14 "send"
check plus its record: the target's activity is bumped. The turn itself is the
edge's to run (this service never speaks ACP); the edge stores it like any turn.
"""

from __future__ import annotations

import dataclasses

import grpc

from acpgate.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.protocol import MSG_SPAWN_AGENT_REQUIRED, MSG_SPAWN_UNKNOWN_REQUESTER
from services.session.aliases import AliasError, launch_spec, resolve_alias
from services.session.convert import launch_to_pb, policy_to_pb, row_to_pb
from services.session.lineage import (
    cap_policy,
    child_workspace,
    current_autonomy,
    effective_autonomy,
    lower_autonomy,
)
from services.session.policy import policy_for
from services.session.rpcs.base import Ctx
from services.session.rpcs.reads import ReadRpcs
from services.session.rpcs.rows import RowRpcs
from services.session.store import SessionNotFound
from services.session.workspace import WorkspaceError

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
            workspace = await child_workspace(self._cfg, alias, parent.workspace_dir, request.cwd)
        except (AliasError, WorkspaceError) as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                        f"cannot prepare agent {alias}: {exc.strerror or exc}")
        # Never above the requester's ceiling, nor above the mode it runs in now.
        level = lower_autonomy(
            lower_autonomy(self._cfg.agent_autonomy(alias), current_autonomy(self._cfg, parent)),
            await effective_autonomy(self._cfg, self._store, parent))
        policy = cap_policy(policy_for(self._cfg, alias, workspace), level)
        owner = parent.ownership.owner_session_key or parent.ownership.session_key
        rec = await self._create(
            context, request.session_id, alias, workspace,
            gateway_instance_id=request.gateway_instance_id, host=request.host,
            title=request.label, spawned_by=key, parent_session_key=key,
            owner_session_key=owner)
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
        """The "send" check (a hidden row is NOT_FOUND like a missing one), recorded as
        activity of the target."""
        rec = await self._visible(request.requester_session_key, request.visibility,
                                  request.session_id, "send", context)
        try:
            rec = await self._store.touch(rec.session_id)
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        log.info("session_send", session_id=rec.session_id,
                 requester=request.requester_session_key)
        return pb.SendToSessionResponse(session=row_to_pb(rec))
