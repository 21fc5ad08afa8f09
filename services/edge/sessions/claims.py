"""This host's claims on the sessions it serves, when several hosts share one store.

Each host runs its own lifecycle service (its gateway instance id) and edge;
the session rows may live in one shared database. The edge whose adapter serves
a session holds the row's *claim* (session service ``ClaimSession``), and:

- takes it before a stored session is restored here — another live host's claim
  refuses the restore with SPEC §8's "Session already active" (-32602);
- renews the claims of every session it serves or is setting up, every third
  of the claim's lease time (``StoreStatus.claim_ttl_ms``): the heartbeat. A
  host that dies stops renewing, and after the lease time its sessions may be
  loaded anywhere — at once on PostgreSQL, where the session service holds the
  host's liveness lock and the server drops it with the dead host's connection;
- gives a session up at once when the heartbeat says its claim was lost (taken
  over after this host failed to renew in time): two hosts never serve one
  session;
- drops the claim when the session is released (``ReleaseSession``, which never
  touches a session another host holds);
- reports what each of those sessions is doing (``ReportActivity``: a turn
  running, a question to the client open; :mod:`services.edge.sessions.activity`) with
  every heartbeat, and in between as soon as that changes (looked at twice a
  second), so that operators (``acpgate ps``) see it;
- keeps the *generation* of each claim it took (``Claim.generation``: one more per
  claim taken, kept by renewals) and sends it with every write it makes as the
  holder — the turn, the row's state, its release — so that a write made after
  another host took the session over (this host was cut off past its lease) is
  refused by the store instead of landing after the new holder's: :meth:`fence`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Final

from services.common.jsonrpc import JsonRpcError
from services.common.logs import get_logger
from services.common.protocol import (
    INVALID_PARAMS,
    MSG_SESSION_ALREADY_ACTIVE,
    MSG_SESSION_TAKEN_OVER,
    SESSION_TAKEN_OVER,
)
from services.edge.backends.errors import Failure, ServiceError
from services.edge.backends.session_types import SessionActivity, SessionRow
from services.edge.errors import service_error
from services.edge.sessions.activity import Shape, changed, shape
from services.edge.sessions.sibling import on_sibling

if TYPE_CHECKING:
    from services.edge.backends.session import SessionBackend

__all__ = ["DEFAULT_CLAIM_TTL_MS", "HostClaims", "refusal", "taken_over"]

log = get_logger("edge.claims")

#: The claim lease time when the session service does not say (an older service).
DEFAULT_CLAIM_TTL_MS: Final = 30_000
#: Shortest pause between heartbeats, whatever the lease time.
_MIN_INTERVAL_SECS: Final = 0.05
#: How often the heartbeat looks whether a session's activity changed (and reports it).
ACTIVITY_TICK_SECS: Final = 0.5

#: What the heartbeat is handed: each session served, with what it is doing.
Serving = Mapping[str, SessionActivity]


class HostClaims:
    """The claims of one gateway instance, through the session service."""

    def __init__(self, service: SessionBackend, public_url: str = "") -> None:
        self._service = service
        #: Where clients reach this host (``[gateway] public_url``; "" = none configured),
        #: recorded in every claim it takes: another host's -32007 names it.
        self.public_url = public_url
        #: This host's lifecycle service's instance id ("" until the runtime starts).
        self.instance_id = ""
        #: This machine's name, recorded in the claims for operators.
        self.host = socket.gethostname()
        self.ttl_ms = DEFAULT_CLAIM_TTL_MS
        #: The generation of each claim this host holds (session id → generation).
        self._generations: dict[str, int] = {}
        #: The activity last reported (None: nothing yet; reports stop for a service
        #: that does not know ReportActivity).
        self._reported: Serving | None = None
        self._reported_shapes: set[Shape] = set()
        self._reports = True

    def configure(self, instance_id: str, ttl_ms: int) -> None:
        """Who this host is and how long its claims last (from the services at start)."""
        self.instance_id = instance_id
        self.ttl_ms = ttl_ms if ttl_ms > 0 else DEFAULT_CLAIM_TTL_MS

    @property
    def interval_secs(self) -> float:
        """How often the heartbeat renews: a third of the lease time."""
        return max(_MIN_INTERVAL_SECS, self.ttl_ms / 3000)

    def certainly_held(self, taken_at: float, now: float) -> bool:
        """Whether a claim this host took at ``taken_at`` (monotonic seconds, read before the
        request that took it went out) is certainly still its own at ``now``: less than one
        heartbeat interval passed, so two thirds of its lease time are left, and no other
        host can take a claim before it expires (unless this host's liveness lock was lost:
        the write stays fenced by the claim generation)."""
        return now - taken_at < self.interval_secs

    async def claim(self, session_id: str) -> SessionRow:
        """Take the session for this host (and remember the claim's generation); -32602
        "Session already active" when another live host holds it, the usual mapping of the
        service's other refusals."""
        try:
            row = await self._service.claim_session(session_id, self.instance_id, self.host,
                                                    self.public_url)
        except ServiceError as exc:
            error = refusal(exc, session_id)
            if exc.kind is Failure.CONFLICT:  # a sibling worker's? name it
                error = await on_sibling(self._service, self.instance_id, session_id, error)
            raise error from None
        self.held(row)
        return row

    def held(self, row: SessionRow) -> None:
        """Remember the generation of ``row``'s claim when it is this host's (a row written
        claimed: ``CreateSession``, ``ResolveNewSession``, ``SpawnSession``, ``ClaimSession``)."""
        if self.instance_id and row.claim.instance_id == self.instance_id:
            self._generations[row.session_id] = row.claim.generation

    def generation(self, session_id: str) -> int:
        """The generation of this host's claim on the session (0: none known, not fenced)."""
        return self._generations.get(session_id, 0)

    def fence(self, session_id: str) -> tuple[str, int]:
        """``(holder_instance_id, claim_generation)`` for a write this host makes as the
        session's holder."""
        return self.instance_id, self.generation(session_id)

    async def release(self, session_id: str, generation: int = 0) -> None:
        """Mark the session inactive and drop this host's claim ``generation`` (0: the one
        it holds now) — fenced: never a claim taken since by another host, nor a later one
        of its own (a session restored again while its old incarnation was still being
        released keeps the newer claim). Failures are logged."""
        held = self._generations.get(session_id, 0)
        if not generation or generation == held:
            generation = self._generations.pop(session_id, 0)
        try:
            await self._service.release_session(session_id, self.instance_id, generation)
        except ServiceError as exc:
            log.warning("release_failed", session_id=session_id, code=exc.code)

    async def renew(self, session_ids: Collection[str]) -> list[str]:
        """One heartbeat for ``session_ids``; the ids whose claims this host lost."""
        if not session_ids:
            return []
        return await self._service.renew_claims(self.instance_id, sorted(session_ids))

    async def report(self, serving: Serving) -> None:
        """Tell the session service what every session served here is doing (failures are
        logged: the report is for operators, the next beat sends it again)."""
        if not self._reports or not self.instance_id:
            return
        try:
            await self._service.report_activity(self.instance_id, self.host,
                                                [serving[sid] for sid in sorted(serving)])
        except ServiceError as exc:
            if exc.kind is Failure.UNIMPLEMENTED:  # an older session service
                self._reports = False
            log.info("activity_report_failed", code=exc.code)
            return
        self._reported = serving
        self._reported_shapes = shape(serving.values())

    async def heartbeat(self, serving: Callable[[], Serving],
                        on_lost: Callable[[str], None],
                        shapes: Callable[[], set[Shape]] | None = None) -> None:
        """Renew the claims of ``serving()`` every :attr:`interval_secs` forever, ``on_lost``
        for each one lost; report their activity with each renewal and whenever it changes
        in between (``shapes``: the same as :func:`shape` of ``serving()``, cheaper — only
        it is computed between the reports). A failed renewal (the service restarting) is
        retried at the next beat, well within the lease."""
        loop = asyncio.get_running_loop()
        renew_at = loop.time() + self.interval_secs
        while True:
            await asyncio.sleep(max(0.0, min(ACTIVITY_TICK_SECS, renew_at - loop.time())))
            if loop.time() < renew_at:
                if not self._reports or not self.instance_id:
                    continue  # nothing is reported: nothing to compare
                if shapes is not None:
                    if self._reported is None or shapes() != self._reported_shapes:
                        await self.report(serving())
                    continue
                current = serving()
                if changed(self._reported, current):
                    await self.report(current)
                continue
            current = serving()
            renew_at = loop.time() + self.interval_secs
            await self.report(current)
            try:
                lost = await self.renew(current)
            except ServiceError as exc:
                log.warning("claims_renewal_failed", code=exc.code, detail=exc.detail)
                continue
            for session_id in lost:
                # The generation stays until the release: the session's last writes (a
                # turn ending now) must still be fenced off, not unfenced.
                log.warning("session_claim_lost", session_id=session_id)
                with contextlib.suppress(Exception):
                    on_lost(session_id)


def taken_over(session_id: str) -> JsonRpcError:
    """The answer to a turn that was not stored because another host holds the session."""
    return JsonRpcError(SESSION_TAKEN_OVER, MSG_SESSION_TAKEN_OVER.format(session_id=session_id))


def refusal(exc: ServiceError, session_id: str) -> JsonRpcError:
    """A claim refused by the session service, as the dialect answers it: a conflict (another
    host's live claim) is SPEC §8's -32602 "Session already active"."""
    if exc.kind is Failure.CONFLICT:
        return JsonRpcError(INVALID_PARAMS, MSG_SESSION_ALREADY_ACTIVE.format(session_id=session_id))
    return service_error(exc, session_id)
