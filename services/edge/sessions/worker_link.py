"""One edge worker among several on one port: its side of the shared limits.

``acpgate serve`` with ``[gateway] workers`` above one runs that many edges
on the one listening socket; a connection lands on whichever accepts it. The
host's limits — connections, sessions, each token's shares — are counted by the
session service (:mod:`services.session.live.worker_ledger`, rule 3: it decides), which
every worker tells what it holds:

- a new connection or session is counted locally first (the limits of this
  worker alone, as with one edge), then taken at the session service
  (:meth:`WorkerLink.take`) with the worker's change number (:attr:`WorkerLink.seq`);
  a refusal there is undone locally and answered like a local one;
- the worker's whole picture — what it holds, by kind and principal, and its
  counters for ``/metrics`` — goes to the session service every
  :data:`REPORT_SECS`, and at once when it lets something go (:meth:`changed`), so
  a slot freed on one worker is free on the others at once;
- a take refused while the principal has a detached idle session on some worker
  is refused with ``releasing`` (services.session.live.worker_ledger): that worker releases it
  when the answer to its next report says so (:meth:`WorkerLink.set_releaser`), and
  the taker takes again meanwhile (:meth:`WorkerLink.take_making_room`);
- a worker that dies stops reporting; the session service forgets it after a
  claim's lease time, and its restarted successor (same name, new incarnation)
  replaces it at its first report.

The worker's name (``<instance>/w<N>``) is also the claim identity of its
sessions (``services.edge.sessions.claims``): a session another worker serves is
claimed by that one, and a ``session/load`` of it here gets "Session already
active" instead of a second adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from services.common.logs import get_logger
from services.edge.backends.errors import ServiceError

if TYPE_CHECKING:
    from services.edge.backends.session import SessionBackend

__all__ = ["REPORT_SECS", "Held", "SharedRefusal", "WorkerLink", "split_worker_name",
           "worker_name"]

log = get_logger("edge.workers")

#: How often a worker reports its picture when nothing was let go meanwhile.
REPORT_SECS: Final = 0.5
#: How long a take or a report may take before it counts as failed.
_CALL_SECS: Final = 5.0
#: A take refused while a session is released for it is tried again this often, for at
#: most this long (the releasing worker reports within REPORT_SECS, at once once it did).
_RETAKE_SECS: Final = 0.1
_RETAKE_FOR_SECS: Final = 10 * REPORT_SECS

#: A worker's picture: how many of each (kind, principal) it holds.
Held = Counter[tuple[int, str]]


def worker_name(instance_id: str, worker: int) -> str:
    """The claim identity of worker ``worker`` of the host whose lifecycle instance is
    ``instance_id``."""
    return f"{instance_id}/w{worker}"


def split_worker_name(claim_instance_id: str) -> tuple[str, int]:
    """``(host instance id, worker number)`` of a claim's holder (0: no worker's — a lone
    edge's, whose claim identity is its host's)."""
    instance, sep, number = claim_instance_id.rpartition("/w")
    if sep and number.isdigit():
        return instance, int(number)
    return claim_instance_id, 0


@dataclass(frozen=True)
class SharedRefusal:
    """A take refused by the session service: the limit, and whether it was the share."""

    limit: int
    per_principal: bool
    releasing: bool = False


class WorkerLink:
    """This worker's reports to, and takes from, the session service."""

    def __init__(self, service: SessionBackend, worker: int) -> None:
        self._service = service
        self.worker = worker
        #: This worker in its pool: the pool (its host's instance id), its name, and this
        #: process's run of it (a restarted worker is a new incarnation).
        self._pool = ""
        self._name = ""
        self._incarnation = uuid.uuid4().hex
        #: The change number: one more at every local count that is then taken.
        self.seq = 0
        self._pictures: list[Callable[[], Held]] = []
        self._counters: Callable[[], Mapping[str, int]] | None = None
        self._releaser: Callable[[str, int], None] | None = None
        self._changed = asyncio.Event()

    def configure(self, instance_id: str) -> str:
        """Join the pool of the host ``instance_id``; returns this worker's name."""
        self._pool = instance_id
        self._name = worker_name(instance_id, self.worker)
        return self._name

    @property
    def name(self) -> str:
        """This worker's name ("" before :meth:`configure`)."""
        return self._name

    def add_picture(self, picture: Callable[[], Held]) -> None:
        """One more source of what this worker holds (its sessions; its connections)."""
        self._pictures.append(picture)

    def set_counters(self, counters: Callable[[], Mapping[str, int]]) -> None:
        """What this worker reports for ``/metrics`` (its runtime's and gateway's counters)."""
        self._counters = counters

    def set_releaser(self, releaser: Callable[[str, int], None]) -> None:
        """Who releases ``count`` of a principal's detached idle sessions when the session
        service says so (in the answer to a report)."""
        self._releaser = releaser

    def counted(self) -> int:
        """Call right after a local count that is to be taken: its change number."""
        self.seq += 1
        return self.seq

    def changed(self) -> None:
        """Something was let go: report at once."""
        self._changed.set()

    async def take(self, kind: int, principal: str, seq: int, *,
                   limit: int, share: int) -> SharedRefusal | None:
        """Take the slot counted locally at ``seq`` for ``principal`` (``limit`` 0: the
        total is not checked; ``share`` 0 or principal "": no share); the refusal, or
        None. A session service that cannot be asked refuses nothing (logged): the
        worker's own limits still hold, and nothing is set up without that service."""
        try:
            resp = await self._service.take_slot(
                self._pool, self._name, self._incarnation, kind=kind, principal=principal,
                limit=limit, share=share, seq=seq, deadline_secs=_CALL_SECS)
        except ServiceError as exc:
            log.warning("worker_take_failed", code=exc.code)
            return None
        if resp.granted:
            return None
        return SharedRefusal(resp.limit, resp.per_principal, resp.releasing)

    async def take_making_room(self, kind: int, principal: str, seq: int, *,
                               limit: int, share: int) -> SharedRefusal | None:
        """:meth:`take`, taken again while a session of the principal is being released for
        it (on whichever worker holds one), until granted or refused outright."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _RETAKE_FOR_SECS
        while True:
            refused = await self.take(kind, principal, seq, limit=limit, share=share)
            if refused is None or not refused.releasing or loop.time() >= give_up:
                return refused
            await asyncio.sleep(_RETAKE_SECS)

    def picture(self) -> Held:
        """What this worker holds now, every source together."""
        held: Held = Counter()
        for source in self._pictures:
            held.update(source())
        return held

    async def report(self) -> None:
        """Send the whole picture and the counters once (failures logged, sent again)."""
        seq, held = self.seq, self.picture()  # one tick: the picture holds every seq ≤ it
        counters = dict(self._counters()) if self._counters is not None else {}
        try:
            release = await self._service.report_worker(
                self._pool, self._name, self._incarnation, seq=seq, counters=counters,
                held=[(kind, principal, n)
                      for (kind, principal), n in sorted(held.items()) if n > 0],
                deadline_secs=_CALL_SECS)
        except ServiceError as exc:
            log.info("worker_report_failed", code=exc.code)
            return
        for principal, count in release:
            if self._releaser is not None and count:
                self._releaser(principal, count)

    async def run(self) -> None:
        """Report at once (this worker joins its pool), then every :data:`REPORT_SECS` and
        at once after :meth:`changed`, forever."""
        while True:
            self._changed.clear()
            await self.report()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), REPORT_SECS)

    async def peers(self) -> dict[int, Mapping[str, int]]:
        """The last counters of every other live worker of this host, by worker number
        (none when the session service cannot be asked: ``/metrics`` then shows this
        worker's own)."""
        try:
            workers = await self._service.list_workers(self._pool, deadline_secs=_CALL_SECS)
        except ServiceError as exc:
            log.info("worker_list_failed", code=exc.code)
            return {}
        return {split_worker_name(w.worker)[1]: w.counters for w in workers
                if w.worker != self._name}
