"""What every group of session RPCs shares: the config, the store, a row lookup, pages.

Each group (:mod:`.agents`, :mod:`.rows`, :mod:`.history`, :mod:`.reads`) is a
subclass of :class:`RpcBase` that implements some RPCs of the generated
servicer; :class:`services.session.servicer.SessionServicer` inherits them all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from acpgate.session.v1 import session_pb2 as pb
from acpgate.session.v1 import session_pb2_grpc
from services.common.config import Config
from services.common.grpc_server import abort
from services.session.convert import entry_to_pb
from services.session.history_pages import cut_pages
from services.session.store import SessionNotFound, SessionRecord, SessionStore

__all__ = ["Ctx", "RpcBase"]

Ctx: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class RpcBase(session_pb2_grpc.SessionServiceServicer):
    """The state of the servicer: the config and a :class:`SessionStore` (any backend)."""

    def __init__(self, cfg: Config, store: SessionStore) -> None:
        self._cfg = cfg
        self._store = store
        #: How long a claim lasts without renewal ([store] lease_secs).
        self._claim_ttl_ms = cfg.store.lease_secs * 1000

    async def _get(self, session_id: str, context: Ctx) -> SessionRecord:
        """The row of ``session_id``; INVALID_ARGUMENT when empty, NOT_FOUND when unknown."""
        if not session_id:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "session_id is required")
        try:
            return await self._store.get_session(session_id)
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))

    async def _history_pages(
        self, session_id: str, after_seq: int, context: Ctx
    ) -> AsyncIterator[pb.HistoryPage]:
        """The stored items after ``after_seq`` as ``HistoryPage`` messages (NOT_FOUND if the
        row went away)."""
        # Each store read goes out at once as one or more pages (never one item per message).
        try:
            async for rows in self._store.iter_history_pages(session_id, after_seq=after_seq):
                for page in cut_pages(entry_to_pb(entry) for entry in rows):
                    yield page
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
