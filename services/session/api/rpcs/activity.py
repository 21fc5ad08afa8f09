"""Operators' view of what runs: ReportActivity and ListLiveSessions.

The edges report what their sessions are doing (:mod:`services.session.live.activity`
keeps it in memory); ``acpgate ps`` lists the sessions an instance's live claim
holds, each with its instance's latest report. Both are behind the service
credential, like every RPC here: only the install's own processes and whoever
can read its service key call them.
"""

from __future__ import annotations

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import Config
from services.session.api.convert import row_to_pb
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.live.activity import ActivityBoard
from services.session.store import SessionStore, wall_clock_ms

__all__ = ["MAX_LIVE_SESSIONS", "ActivityRpcs"]

#: Live sessions one ListLiveSessions answers at most (every instance's sessions together).
MAX_LIVE_SESSIONS = 10_000
_PAGE = 500


class ActivityRpcs(RpcBase):
    """ReportActivity, ListLiveSessions."""

    def __init__(self, cfg: Config, store: SessionStore, *, seal_key: bytes) -> None:
        super().__init__(cfg, store, seal_key=seal_key)
        self._activity = ActivityBoard(self._claim_ttl_ms)

    async def ReportActivity(self, request: pb.ReportActivityRequest,
                             context: Ctx) -> pb.ReportActivityResponse:
        """Keep the instance's report (replacing its last)."""
        self._activity.report(request.gateway_instance_id, request.host, request.sessions,
                              wall_clock_ms())
        return pb.ReportActivityResponse()

    async def ListLiveSessions(self, request: pb.ListLiveSessionsRequest,
                               context: Ctx) -> pb.ListLiveSessionsResponse:
        """The rows a live claim holds, newest activity first, with their activity."""
        now = wall_clock_ms()
        out: list[pb.LiveSession] = []
        after: tuple[int, str] | None = None
        while len(out) < MAX_LIVE_SESSIONS:
            page = await self._store.list_sessions(after=after, limit=_PAGE, live=True)
            for rec in page:
                live = pb.LiveSession(session=row_to_pb(rec))
                reported = self._activity.of(rec.claim.instance_id, rec.session_id, now)
                if reported is not None:
                    live.activity.CopyFrom(reported[0])
                    live.reported_at = reported[1]
                out.append(live)
            if len(page) < _PAGE:
                break
            after = (page[-1].last_activity, page[-1].session_id)
        return pb.ListLiveSessionsResponse(sessions=out[:MAX_LIVE_SESSIONS])
