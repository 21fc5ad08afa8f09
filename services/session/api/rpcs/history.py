"""Session RPCs on history, for trusted callers (the edge): append a turn, stream it back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.session.api.convert import append_result_to_pb, pb_to_entry, usage_from_pb
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.api.turn_from_log import turn_items_from_log
from services.session.store import (
    InvalidItem,
    Quota,
    QuotaExceeded,
    SessionActiveElsewhere,
    SessionNotFound,
)

__all__ = ["HistoryRpcs"]

log = get_logger("session.servicer")


class HistoryRpcs(RpcBase):
    """AppendTurn and StreamHistory (no visibility check)."""

    async def AppendTurn(
        self, request: pb.AppendTurnRequest, context: Ctx
    ) -> pb.AppendTurnResponse:
        """One completed turn in one transaction (SPEC §8): fenced by the holder's claim
        generation (ABORTED), within the byte quotas (RESOURCE_EXHAUSTED)."""
        store = self._cfg.store
        items = list(request.items)
        plan_json = request.plan_json if request.HasField("plan_json") else None
        if request.log_turn_id:  # a turn the edge did not keep: its items from the log
            logged, logged_plan = await turn_items_from_log(
                self._store, request.session_id, request.log_turn_id)
            items = items[:1] + logged
            plan_json = plan_json if plan_json is not None else logged_plan
        try:
            result = await self._store.append_turn(
                request.session_id,
                [pb_to_entry(i) for i in items],
                token_delta=request.token_delta,
                plan_json=plan_json,
                usage=usage_from_pb(request.usage) if request.HasField("usage") else None,
                holder=request.holder_instance_id or None,
                generation=request.claim_generation,
                quota=Quota(store.max_session_bytes, store.max_token_bytes),
            )
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except SessionActiveElsewhere as exc:
            log.warning("turn_fenced", session_id=request.session_id,
                        holder=request.holder_instance_id, generation=request.claim_generation,
                        claim=exc.claim.instance_id, claim_generation=exc.claim.generation)
            await abort(context, grpc.StatusCode.ABORTED, str(exc))
        except QuotaExceeded as exc:
            log.warning("turn_over_quota", session_id=request.session_id, scope=exc.scope,
                        used=exc.used, limit=exc.limit)
            await abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except InvalidItem as exc:
            log.warning("turn_rejected", session_id=request.session_id, reason=str(exc))
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return append_result_to_pb(result)

    async def StreamHistory(
        self, request: pb.StreamHistoryRequest, context: Ctx
    ) -> AsyncIterator[pb.HistoryPage]:
        """The stored conversation, oldest first, in pages (trusted callers)."""
        await self._get(request.session_id, context)
        async for page in self._history_pages(request.session_id, request.after_seq, context):
            yield page
