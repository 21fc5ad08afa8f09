"""Session RPCs on rows, for trusted callers (the edge): create, get, update, touch, delete,
and the claims of several hosts on them: claim, renew, release."""

from __future__ import annotations

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.session.api.convert import row_to_pb, state_from_pb
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.store import (
    InvalidItem,
    SessionActiveElsewhere,
    SessionNotFound,
    SessionRecord,
)

__all__ = ["RowRpcs"]

log = get_logger("session.servicer")


class RowRpcs(RpcBase):
    """CreateSession, GetSession, UpdateSession, TouchSession, DeleteSession, ClaimSession,
    RenewClaims, ReleaseSession (no visibility check: the edge checks it, as for a restore)."""

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: Ctx
    ) -> pb.SessionRow:
        """Write a new row with SPEC §13 ownership."""
        rec = await self._create_row(context, request, request.agent_alias, request.workspace_dir,
                                     request.additional_directories)
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
                mode_id=opt("mode_id"),
                config_json=opt("config_json"),
                additional_directories=(tuple(request.additional_directories.values)
                                        if request.HasField("additional_directories") else None),
                protocol_version=(request.protocol_version
                                  if request.HasField("protocol_version") else None),
                holder=request.holder_instance_id or None,
                generation=request.claim_generation,
            )
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except SessionActiveElsewhere as exc:
            await abort(context, grpc.StatusCode.ABORTED, str(exc))
        return row_to_pb(rec)

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: Ctx
    ) -> pb.DeleteSessionResponse:
        """Remove the row and its history in one transaction; ABORTED (nothing removed) while
        another instance than ``holder_instance_id`` serves it."""
        try:
            deleted = await self._store.delete_session(
                request.session_id, holder=request.holder_instance_id or None)
        except SessionActiveElsewhere as exc:
            log.info("session_active_elsewhere", session_id=request.session_id,
                     holder=exc.claim.instance_id, holder_host=exc.claim.host)
            await abort(context, grpc.StatusCode.ABORTED, str(exc))
        if deleted:
            log.info("session_deleted", session_id=request.session_id)
        return pb.DeleteSessionResponse(deleted=deleted)

    async def TouchSession(self, request: pb.TouchSessionRequest, context: Ctx) -> pb.SessionRow:
        """Bump last_activity."""
        try:
            return row_to_pb(await self._store.touch(request.session_id))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))

    # -- claims (several hosts, one store)

    async def _claim(self, session_id: str, instance_id: str, host: str, context: Ctx,
                     public_url: str = "") -> SessionRecord:
        try:
            return await self._store.claim(session_id, instance_id, host=host,
                                           ttl_ms=self._claim_ttl_ms, public_url=public_url)
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except SessionActiveElsewhere as exc:
            log.info("session_active_elsewhere", session_id=session_id,
                     holder=exc.claim.instance_id, holder_host=exc.claim.host)
            await abort(context, grpc.StatusCode.ABORTED, str(exc))

    async def ClaimSession(self, request: pb.ClaimSessionRequest, context: Ctx) -> pb.SessionRow:
        """Take (or renew) the claim unless another instance's claim is live (ABORTED)."""
        if not request.session_id:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "session_id is required")
        rec = await self._claim(request.session_id, request.gateway_instance_id, request.host,
                                context, request.public_url)
        return row_to_pb(rec)

    async def RenewClaims(
        self, request: pb.RenewClaimsRequest, context: Ctx
    ) -> pb.RenewClaimsResponse:
        """The heartbeat: renew what the instance still holds, name what it lost."""
        try:
            held = await self._store.renew_claims(
                request.gateway_instance_id, list(request.session_ids),
                ttl_ms=self._claim_ttl_ms,
            )
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        kept = set(held)
        lost = [s for s in dict.fromkeys(request.session_ids) if s not in kept]
        if lost:
            log.warning("session_claims_lost", instance=request.gateway_instance_id,
                        sessions=lost)
        return pb.RenewClaimsResponse(held=held, lost=lost)

    async def ReleaseSession(
        self, request: pb.ReleaseSessionRequest, context: Ctx
    ) -> pb.ReleaseSessionResponse:
        """Mark the session inactive and drop the claim, unless another instance (or a later
        generation) holds it."""
        released = await self._store.release_claim(request.session_id,
                                                   request.gateway_instance_id,
                                                   request.claim_generation)
        return pb.ReleaseSessionResponse(released=released)
