"""What every group of session RPCs shares: the config, the store, a row lookup, pages.

Each group (:mod:`.agents`, :mod:`.rows`, :mod:`.history`, :mod:`.reads`) is a
subclass of :class:`RpcBase` that implements some RPCs of the generated
servicer; :class:`services.session.api.servicer.SessionServicer` inherits them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeAlias

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.config import Config
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.session.api.convert import entry_to_pb
from services.session.api.history_pages import cut_pages
from services.session.store import (
    InvalidItem,
    NewSession,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    SessionStore,
)

__all__ = ["Ctx", "RpcBase"]

log = get_logger("session.servicer")

Ctx: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class RpcBase(session_pb2_grpc.SessionServiceServicer):
    """The state of the servicer: the config and a :class:`SessionStore` (any backend)."""

    def __init__(self, cfg: Config, store: SessionStore, *, seal_key: bytes) -> None:
        self._cfg = cfg
        self._store = store
        #: Seals every launch spec this service resolves (the lifecycle service runs no other).
        self._seal_key = seal_key
        #: How long a claim lasts without renewal ([store] lease_secs).
        self._claim_ttl_ms = cfg.store.lease_secs * 1000

    def use_config(self, cfg: Config) -> None:
        """Decide with ``cfg`` from now on (a reload): one reference swapped, so each read
        of ``self._cfg`` sees one whole config, never a mix of fields."""
        self._cfg = cfg

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

    async def _create_row(self, context: Ctx, request: pb.CreateSessionRequest, alias: str,
                          workspace_dir: str, additional_directories: Sequence[str]
                          ) -> SessionRecord:
        """The row ``request`` asks for, of ``alias`` in ``workspace_dir`` with those extra
        roots (CreateSession's own fields, or those ResolveNewSession decided)."""
        rec = await self._create(context, NewSession(
            request.session_id, alias, workspace_dir,
            spawned_by=request.spawned_by,
            parent_session_key=request.parent_session_key,
            owner_session_key=request.owner_session_key,
            gateway_instance_id=request.gateway_instance_id,
            host=request.host,
            public_url=request.public_url,
            mcp_servers_json=request.mcp_servers_json,
            additional_directories=tuple(additional_directories),
            subagent=request.subagent,
        ))
        log.info("session_created", session_id=rec.session_id, agent=rec.agent_alias)
        return rec

    async def _create(self, context: Ctx, new: NewSession) -> SessionRecord:
        """The row ``new`` describes (INVALID_ARGUMENT / ALREADY_EXISTS when refused), claimed
        by its ``gateway_instance_id`` when it names one. CreateSession and SpawnSession
        both write rows through here."""
        claim_ttl_ms = self._claim_ttl_ms if new.gateway_instance_id else None
        try:
            # Titled and claimed in the insert itself: one store transaction.
            return await self._store.create_session(
                dataclasses.replace(new, claim_ttl_ms=claim_ttl_ms))
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionExists as exc:
            await abort(context, grpc.StatusCode.ALREADY_EXISTS, str(exc))
