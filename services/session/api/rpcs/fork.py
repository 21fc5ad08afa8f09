"""ACP ``session/fork`` in the session service: ``ForkSession``.

Everything about a fork is decided here, once, from the config and the stored
rows; the edge then brings the fork's adapter up (the service never speaks ACP):

- **Who may fork** — the requester is a principal (a client connection) or the
  operator, and the parent must be a session it may act on: its own
  principal's (the operator: any). No grant reaches across principals, and a
  session it may not act on answers exactly like a missing one (NOT_FOUND).
- **What the fork is** — a new row of the parent's principal (owned like the
  parent: a sibling, never its child, so closing the parent leaves it alone and
  its autonomy is capped by the same ancestors), in the parent's workspace
  (``cwd`` must name it), on the agent a restore of the parent would run (SPEC
  §8's chain), with the request's extra roots and MCP servers or else the
  parent's, and ``forked_from`` = the parent. Its policy is decided as
  ``GetPolicy`` decides a restored session's.
- **The copy** — its row and the parent's history in one store transaction,
  claimed by the calling instance; the copied bytes count against the owner's
  ``[store] max_token_bytes`` (RESOURCE_EXHAUSTED with the quota's sentence,
  nothing written). The parent is only read — no claim on it is taken, so a
  session another host serves is forked as far as its turns are stored.
"""

from __future__ import annotations

import asyncio

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.principals import is_principal_key
from services.common.protocol import MSG_FORK_REQUESTER
from services.session.api.convert import policy_to_pb, row_to_pb
from services.session.api.rpcs.agents import AgentRpcs
from services.session.api.rpcs.base import Ctx
from services.session.api.rpcs.reads import ReadRpcs
from services.session.decisions.aliases import resolve_restore_alias
from services.session.decisions.workspace import (
    WorkspaceError,
    check_fork_cwd,
    resolve_additional_directories,
)
from services.session.store import (
    InvalidItem,
    Quota,
    QuotaExceeded,
    SessionExists,
    SessionNotFound,
    SessionRecord,
)

__all__ = ["ForkRpcs"]

log = get_logger("session.servicer")


class ForkRpcs(AgentRpcs, ReadRpcs):
    """ForkSession."""

    async def ForkSession(
        self, request: pb.ForkSessionRequest, context: Ctx
    ) -> pb.ForkSessionResponse:
        """A new session with a copy of a stored session's history (module doc)."""
        if not self._store.persistent:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                        f"session store is in memory ({self._store.status.fallback_reason}); "
                        "sessions cannot be forked")
        if not request.session_id or not request.parent_session_id:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                        "session_id and parent_session_id are required")
        key = request.requester_session_key
        if key and not is_principal_key(key):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_FORK_REQUESTER)
        # "send": acting on the session. No see_all: a grant never drives another's session.
        viewer = await self._viewer(key, "", context, operator=request.operator)
        parent = await self._visible(viewer, request.parent_session_id, "send", context)
        agent = await self._launch(lambda: resolve_restore_alias(self._cfg, parent.agent_alias),
                                   context)
        roots = await self._fork_roots(request, parent, context)
        # The fork's ancestors are the parent's: the parent's row caps it as its own would.
        policy = await self._session_policy(
            agent.alias, parent.workspace_dir,
            parent.additional_directories if roots is None else roots, parent, context,
            local_user=request.local_user)
        rec = await self._fork(request, parent, agent.alias, roots, context)
        log.info("session_forked", session_id=rec.session_id, parent_session_id=parent.session_id,
                 agent=agent.alias, items=rec.message_count, stored_bytes=rec.stored_bytes)
        return pb.ForkSessionResponse(session=row_to_pb(rec), agent=agent,
                                      policy=policy_to_pb(policy), parent=row_to_pb(parent))

    async def _fork_roots(self, request: pb.ForkSessionRequest, parent: SessionRecord,
                          context: Ctx) -> list[str] | None:
        """Check that ``cwd`` names the parent's workspace; the request's extra roots as real
        paths (None: keep the parent's). INVALID_ARGUMENT with the client's message."""
        try:
            await asyncio.to_thread(check_fork_cwd, request.cwd, request.base_dir,
                                    parent.workspace_dir)
            if not request.HasField("additional_directories"):
                return None
            return await resolve_additional_directories(
                self._cfg, request.additional_directories.values, request.base_dir,
                parent.workspace_dir, local_user=request.local_user)
        except WorkspaceError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    async def _fork(self, request: pb.ForkSessionRequest, parent: SessionRecord, alias: str,
                    roots: list[str] | None, context: Ctx) -> SessionRecord:
        """The store's fork, its refusals as status codes."""
        store = self._cfg.store
        try:
            return await self._store.fork_session(
                parent.session_id, request.session_id, agent_alias=alias,
                gateway_instance_id=request.gateway_instance_id, host=request.host,
                public_url=request.public_url,
                claim_ttl_ms=self._claim_ttl_ms, additional_directories=roots,
                mcp_servers_json=request.mcp_servers_json
                if request.HasField("mcp_servers_json") else None,
                quota=Quota(store.max_session_bytes, store.max_token_bytes))
        except SessionNotFound as exc:  # deleted meanwhile
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except SessionExists as exc:
            await abort(context, grpc.StatusCode.ALREADY_EXISTS, str(exc))
        except QuotaExceeded as exc:
            log.warning("fork_over_quota", parent_session_id=parent.session_id,
                        scope=exc.scope, used=exc.used, limit=exc.limit)
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
