"""Session RPCs on rows, for trusted callers (the edge): create, get, update, touch."""

from __future__ import annotations

import grpc

from acpgate.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.session.convert import row_to_pb, state_from_pb
from services.session.rpcs.base import Ctx, RpcBase
from services.session.store import InvalidItem, SessionExists, SessionNotFound

__all__ = ["RowRpcs"]

log = get_logger("session.servicer")


class RowRpcs(RpcBase):
    """CreateSession, GetSession, UpdateSession, TouchSession (no visibility check)."""

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: Ctx
    ) -> pb.SessionRow:
        """Write a new row with SPEC §13 ownership."""
        try:
            rec = await self._store.create_session(
                request.session_id,
                request.agent_alias,
                request.workspace_dir,
                spawned_by=request.spawned_by,
                parent_session_key=request.parent_session_key,
                owner_session_key=request.owner_session_key,
                gateway_instance_id=request.gateway_instance_id,
                mcp_servers_json=request.mcp_servers_json,
            )
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionExists as exc:
            await abort(context, grpc.StatusCode.ALREADY_EXISTS, str(exc))
        log.info("session_created", session_id=rec.session_id, agent=rec.agent_alias)
        return row_to_pb(rec)

    async def GetSession(self, request: pb.GetSessionRequest, context: Ctx) -> pb.SessionRow:
        """One row (trusted callers; no visibility check)."""
        return row_to_pb(await self._get(request.session_id, context))

    async def UpdateSession(
        self, request: pb.UpdateSessionRequest, context: Ctx
    ) -> pb.SessionRow:
        """Change the fields that are set."""
        state: str | None = None
        if request.HasField("state"):
            state = state_from_pb(request.state)
            if state is None:
                await abort(
                    context, grpc.StatusCode.INVALID_ARGUMENT, "state must be ACTIVE or INACTIVE"
                )

        def opt(name: str) -> str | None:
            return str(getattr(request, name)) if request.HasField(name) else None  # type: ignore[arg-type]

        try:
            rec = await self._store.update_session(
                request.session_id,
                state=state,
                lease_id=opt("lease_id"),
                adapter_session_id=opt("adapter_session_id"),
                plan_json=opt("plan_json"),
                agent_alias=opt("agent_alias"),
                title=opt("title"),
                mcp_servers_json=opt("mcp_servers_json"),
            )
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        return row_to_pb(rec)

    async def TouchSession(self, request: pb.TouchSessionRequest, context: Ctx) -> pb.SessionRow:
        """Bump last_activity."""
        try:
            return row_to_pb(await self._store.touch(request.session_id))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
