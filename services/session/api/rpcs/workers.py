"""Edge workers' shared limits and counters: TakeSlot, ReportWorker, ListWorkers.

The decisions are :class:`~services.session.live.worker_ledger.WorkerLedger`'s (in memory);
like every RPC here they are behind the service credential: only the install's
own processes call them.
"""

from __future__ import annotations

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import Config
from services.common.grpc_server import abort
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.live.worker_ledger import WorkerLedger
from services.session.store import SessionStore, wall_clock_ms

__all__ = ["WorkerRpcs"]


class WorkerRpcs(RpcBase):
    """TakeSlot, ReportWorker, ListWorkers."""

    def __init__(self, cfg: Config, store: SessionStore, *, seal_key: bytes) -> None:
        super().__init__(cfg, store, seal_key=seal_key)
        self._ledger = WorkerLedger(self._claim_ttl_ms)

    async def _check(self, who: pb.WorkerId, context: Ctx) -> None:
        if not who.pool or not who.worker:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                        "worker.pool and worker.worker are required")

    async def TakeSlot(self, request: pb.TakeSlotRequest, context: Ctx) -> pb.TakeSlotResponse:
        """One more connection or session for a worker, if the pool's limits allow it."""
        await self._check(request.worker, context)
        if request.kind == pb.SLOT_KIND_UNSPECIFIED:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "kind is required")
        grant = self._ledger.take(request, wall_clock_ms())
        return pb.TakeSlotResponse(granted=grant.granted, per_principal=grant.per_principal,
                                   limit=grant.limit, releasing=grant.releasing)

    async def ReportWorker(self, request: pb.ReportWorkerRequest,
                           context: Ctx) -> pb.ReportWorkerResponse:
        """A worker's whole picture and counters (its lease renewed); the sessions it is to
        release for room."""
        await self._check(request.worker, context)
        return pb.ReportWorkerResponse(release=self._ledger.report(request, wall_clock_ms()))

    async def ListWorkers(self, request: pb.ListWorkersRequest,
                          context: Ctx) -> pb.ListWorkersResponse:
        """The pool's live workers' last counters."""
        return pb.ListWorkersResponse(workers=[
            pb.WorkerCounters(worker=worker, counters=counters, reported_at=at)
            for worker, counters, at in self._ledger.counters(request.pool, wall_clock_ms())])
