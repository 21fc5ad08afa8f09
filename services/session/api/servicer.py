"""The gRPC face of the session service: every RPC of ``acpgate.session.v1.SessionService``.

One servicer class, registered with grpc, made of the RPC groups in
:mod:`services.session.api.rpcs`; it depends on the store only through the
:class:`~services.session.store.SessionStore` interface, and converts records
to messages only through :mod:`services.session.api.convert`.

Error mapping (see the proto): INVALID_ARGUMENT carries the exact client-facing
SPEC message as its details (the edge forwards it verbatim as -32602),
NOT_FOUND an unknown session — and a session the requester may not see,
ALREADY_EXISTS a duplicate session id, FAILED_PRECONDITION a restore while the
store runs in memory.
"""

from __future__ import annotations

from services.session.api.rpcs.a2a import A2aRpcs
from services.session.api.rpcs.activity import ActivityRpcs
from services.session.api.rpcs.agents import AgentRpcs
from services.session.api.rpcs.events import EventRpcs
from services.session.api.rpcs.fork import ForkRpcs
from services.session.api.rpcs.history import HistoryRpcs
from services.session.api.rpcs.operations import OperationRpcs
from services.session.api.rpcs.reads import ReadRpcs
from services.session.api.rpcs.rows import RowRpcs
from services.session.api.rpcs.workers import WorkerRpcs

__all__ = ["SessionServicer"]


class SessionServicer(ForkRpcs, AgentRpcs, HistoryRpcs, EventRpcs, A2aRpcs, RowRpcs, ReadRpcs,
                      OperationRpcs, ActivityRpcs, WorkerRpcs):
    """Implements ``SessionService`` over a :class:`~services.session.store.SessionStore`
    and the config: ``SessionServicer(cfg, store, seal_key=...)`` (``seal_key`` seals the
    launch specs it resolves, ``GrpcSecurity.seal_key``)."""
