"""Session slots: ``[acp] max_sessions`` and each token's share, held while a session is
set up (SPEC §9) — with several edge workers on one port, the host's
(the session service counts every worker's, services.edge.sessions.worker_link).

A principal at its share or at the host's limit gets room from its own detached idle
sessions first (:mod:`services.edge.sessions.shares`); the -32001 that remains says the
way out (:mod:`services.edge.sessions.limit_error`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from services.common.jsonrpc import JsonRpcError
from services.common.principals import token_id_of
from services.edge.backends.session_types import SLOT_SESSION
from services.edge.sessions.hub import EdgeHub
from services.edge.sessions.limit_error import limit_error
from services.edge.sessions.registry import SessionRegistry, SlotRefusal
from services.edge.sessions.session import EdgeSession
from services.edge.sessions.shares import let_go_for_room

__all__ = ["Slot", "creating", "reserved_slot"]

#: Validates a request's params: raises their -32602, else returns (see reserved_slot).
Validate = Callable[[], Awaitable[None]]


class Slot:
    """One reserved slot, counted against a principal (services.edge.sessions.registry) —
    with several edge workers, the host's slot too (services.edge.sessions.worker_link)."""

    def __init__(self, runtime: EdgeHub[EdgeSession], principal: str, *, explain: bool = False) -> None:
        self._runtime = runtime
        self._registry = runtime.registry
        self.principal = principal
        #: Whether a refusal says the way out (a gateway client's, limit_error).
        self.explain = explain

    def _error(self, refused: SlotRefusal) -> JsonRpcError:
        return limit_error(refused, self._registry, self.principal, explain=self.explain)

    async def take_shared(self, *, total: bool) -> None:
        """Take the slot counted locally just now at the session service: the host's
        ``max_sessions`` (when ``total``) and the principal's share across every worker,
        once a detached idle session of the principal was released for it on whichever
        worker holds one; -32001 when either is full (nothing taken). Nothing to do for a
        lone edge."""
        link = self._runtime.workers
        if link is None:
            return
        registry = self._registry
        refused = await link.take_making_room(
            SLOT_SESSION, self.principal, link.counted(),
            limit=registry.max_sessions if total else 0,
            share=registry.per_token if token_id_of(self.principal) else 0)
        if refused is not None:
            raise self._error(SlotRefusal(refused.limit, per_token=refused.per_principal))

    async def charge(self, principal: str) -> None:
        """Count the slot against ``principal`` (the owner of the row a restore brings up,
        once read); -32001 when that token's share is full."""
        before = self.principal
        refused = self._registry.move(before, principal)
        if refused is not None:
            raise self._error(refused)
        self.principal = principal
        if before == principal:
            return
        try:
            await self.take_shared(total=False)
        except JsonRpcError:
            self._registry.force_move(principal, before)
            self.principal = before
            raise


@asynccontextmanager
async def reserved_slot(runtime: EdgeHub[EdgeSession], principal: str, *, explain: bool = False,
                        validate: Validate | None = None) -> AsyncIterator[Slot]:
    """Hold one of the ``max_sessions`` slots for a session of ``principal`` while it is set
    up; -32001 when the edge (with several workers: the host) is full, or when that token's
    share is (a message of its own), once the principal's detached idle sessions made what
    room they could (module doc). ``explain``: the refusal says the way out (a gateway
    client). ``validate``: the request's params are checked before a refusal is answered
    — their error comes first, as if they had been checked before the slot (the check
    costs a refused request only)."""
    registry = runtime.registry
    if token_id_of(principal):
        registry.per_token = await runtime.shares.current()
    refused = registry.try_reserve(principal)
    while refused is not None:
        releasing = let_go_for_room(runtime, principal)
        if releasing is None:
            if validate is not None:
                await validate()
            raise limit_error(refused, registry, principal, explain=explain)
        await asyncio.shield(releasing)  # its adapter gone before the next one starts
        refused = registry.try_reserve(principal)
    slot = Slot(runtime, principal, explain=explain)
    try:
        try:
            await slot.take_shared(total=True)
        except JsonRpcError:
            if validate is not None:
                await validate()
            raise
        yield slot
    finally:
        runtime.registry.unreserve(slot.principal)


class _Creating:
    """:func:`creating`'s context, plain or async (beside :func:`reserved_slot`)."""

    def __init__(self, registry: SessionRegistry, sid: str) -> None:
        self._registry = registry
        self._sid = sid

    def __enter__(self) -> None:
        self._registry.creating.add(self._sid)

    def __exit__(self, *exc: object) -> None:
        self._registry.creating.discard(self._sid)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()


def creating(registry: SessionRegistry, sid: str) -> _Creating:
    """Count new session ``sid`` among those being set up while it is: its claim is
    renewed from the start (``SessionRegistry.serving``)."""
    return _Creating(registry, sid)
