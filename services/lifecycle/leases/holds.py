"""Leases an Attach stream holds until it has let them go.

``Attach{open.ensure}`` ensures a session's lease and attaches in one stream, and
a lease that stream spawned or took lives as long as the stream: when it ends,
the lease is let go in the background — closed, or an untouched warm adapter
put back in its pool (``LifecycleServicer._left``). Until that let-go is over
the lease is still open under the session's key, so ``ensure_session`` would
hand it to the next ensure of that key as "the live lease of the session": the
adapter then died under it (SIGTERM of the close), or went back to the pool
while it served the session. That is what a ``session/new`` whose early warm
take was dropped met (the edge ensures again at once, for the same key).

So a stream's lease is *held* from its ensure until its let-go has finished
(:class:`StreamHolds`); another ensure of the key waits for that (at most
:data:`LET_GO_WAIT_SECS`, then UNAVAILABLE) and then ensures anew — the pool's
adapter, which may be that very one back untouched, or a spawn. A ``warm_only``
take (the edge's early one) does not wait: it is refused at once, as when the
pool has nothing ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol, TypeVar

from services.common.logs import get_logger
from services.lifecycle.leases.store import LeaseRecord
from services.lifecycle.requests import NoWarmAdapter, Unavailable

__all__ = ["LET_GO_WAIT_SECS", "StreamHolds"]

log = get_logger("lifecycle.holds")

#: How long an ensure waits for another stream to let its lease of the same key go: a
#: close takes the adapter's SIGTERM grace, its SIGKILL and the exit's report.
LET_GO_WAIT_SECS = 30.0


class _HasLease(Protocol):
    """What an ensure answers (``controller.Ensured``), as far as holding goes."""

    @property
    def lease(self) -> LeaseRecord:
        """The lease ensured."""


_Ensured = TypeVar("_Ensured", bound=_HasLease)


class StreamHolds:
    """The leases Attach streams ensured (spawned or took) and have not let go yet."""

    def __init__(self) -> None:
        #: Lease id → set once its let-go has finished.
        self._held: dict[str, asyncio.Event] = {}

    def hold(self, lease_id: str) -> None:
        """``lease_id`` belongs to the stream that ensured it, until :meth:`release`."""
        self._held.setdefault(lease_id, asyncio.Event())

    def held(self, hold: bool, ensured: _Ensured) -> _Ensured:
        """``ensured``, its lease held by the stream that ensured it when ``hold``."""
        if hold:
            self.hold(ensured.lease.lease_id)
        return ensured

    def release(self, lease_id: str) -> None:
        """The stream's let-go of ``lease_id`` is over (closed, or back in its pool); an
        unknown id is ignored."""
        done = self._held.pop(lease_id, None)
        if done is not None:
            done.set()

    def first_held(self, leases: Iterable[LeaseRecord]) -> str:
        """The id of the first of ``leases`` a stream holds ("" when none is)."""
        return next((lease.lease_id for lease in leases if lease.lease_id in self._held), "")

    async def wait_let_go(self, lease_id: str, session_key: str, *, warm_only: bool) -> None:
        """Wait until the stream holding ``lease_id`` (of ``session_key``) has let it go.

        A ``warm_only`` take does not wait (NoWarmAdapter: the key's adapter is another
        stream's); past :data:`LET_GO_WAIT_SECS` the wait gives up (Unavailable).
        """
        if warm_only:
            raise NoWarmAdapter(f"the adapter of {session_key} is held by another stream")
        done = self._held.get(lease_id)
        if done is None:
            return
        log.info("ensure_waits_for_let_go", lease_id=lease_id, session_key=session_key)
        try:
            await asyncio.wait_for(done.wait(), LET_GO_WAIT_SECS)
        except TimeoutError:
            raise Unavailable(f"lease {lease_id} of {session_key} is still held by another "
                              f"Attach stream after {LET_GO_WAIT_SECS:g} s") from None
