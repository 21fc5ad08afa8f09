"""The visibility-filtered session reads of SPEC §14: list, history, status, access checks.

Every RPC here names its requester — a session key, a principal key
(``client:<token id>``, ``local``) or, explicitly, ``operator`` — and a
visibility level (default ``[sessions] visibility``); the rules are
:func:`services.session.decisions.visibility.can_see`. A row the requester may not see
is left out of a list and, asked for by id, answers exactly like a missing one
(NOT_FOUND ``Session not found: <id>``; CheckAccess: not allowed, the same
reason), so a requester cannot even learn that the row exists. A request with
no requester at all is refused (INVALID_ARGUMENT): an empty key is never the
operator.
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
from collections.abc import AsyncIterator

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from services.common.config import VISIBILITY_LEVELS
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.principals import is_principal_key, principal_of_owner
from services.common.protocol import MSG_REQUESTER_AND_OPERATOR, MSG_REQUESTER_REQUIRED
from services.session.api.convert import action_from_pb, row_to_pb
from services.session.api.history_pages import cut_pages
from services.session.api.rpcs.base import Ctx, RpcBase
from services.session.decisions.visibility import A2aPolicy, Requester, VisibilityRow, can_see
from services.session.store import SessionNotFound, SessionRecord

__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "ReadRpcs", "decode_cursor", "encode_cursor",
           "matches_query"]

log = get_logger("session.servicer")

DEFAULT_PAGE = 100
MAX_PAGE = 1000


def visibility_row(rec: SessionRecord) -> VisibilityRow:
    """The ownership fields visibility looks at."""
    o = rec.ownership
    return VisibilityRow(
        key=o.session_key,
        agent_id=o.agent_id,
        owner_session_key=o.owner_session_key,
        spawned_by=o.spawned_by,
        parent_session_key=o.parent_session_key,
    )


def matches_query(rec: SessionRecord, query: str) -> bool:
    """ListSessions' ``query``: the alias, title or id contains it (case-insensitive)."""
    needle = query.strip().casefold()
    if not needle:
        return True
    return any(needle in field.casefold() for field in (rec.agent_alias, rec.title,
                                                        rec.session_id))


def encode_cursor(rec: SessionRecord) -> str:
    """An opaque cursor after ``rec`` in (last_activity DESC, id DESC) order."""
    raw = json.dumps([rec.last_activity, rec.session_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """The position a cursor names; ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):  # RecursionError: nested too deep
        raise ValueError("invalid cursor") from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], int)
        or not isinstance(value[1], str)
    ):
        raise ValueError("invalid cursor")
    return value[0], value[1]


class _Viewer:
    """A resolved requester under one visibility level."""

    def __init__(self, requester: Requester, visibility: str, a2a: A2aPolicy) -> None:
        self.requester = requester
        self.visibility = visibility
        self.a2a = a2a

    def sees(self, rec: SessionRecord, action: str = "list") -> bool:
        """The SPEC §14 check of one row for ``action``."""
        return can_see(visibility_row(rec), self.requester, self.visibility, self.a2a, action)


class ReadRpcs(RpcBase):
    """ListSessions, GetHistory, SessionStatus, CheckAccess."""

    @property
    def _a2a(self) -> A2aPolicy:
        """``[a2a]`` of the config in use (it may be reloaded)."""
        return A2aPolicy(enabled=self._cfg.a2a.enabled, allow=tuple(self._cfg.a2a.allow))

    async def _viewer(self, key: str, visibility: str, context: Ctx, *, operator: bool = False,
                      see_all: bool = False) -> _Viewer:
        """The requester ``key`` (or ``operator``) names, resolved from the stored rows: its
        principal (a session's is its row's), its agent; ``see_all`` is its principal's
        grant. INVALID_ARGUMENT when it names none (an empty key is never the operator) or
        both a key and ``operator``."""
        chosen = visibility or self._cfg.sessions.visibility
        if chosen not in VISIBILITY_LEVELS:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown visibility {chosen!r} (expected one of {', '.join(VISIBILITY_LEVELS)})",
            )
        if operator:
            if key:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_REQUESTER_AND_OPERATOR)
            return _Viewer(Requester(key="", principal="", operator=True), chosen, self._a2a)
        if not key:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, MSG_REQUESTER_REQUIRED)
        if is_principal_key(key):  # a client connection acting for its principal
            return _Viewer(Requester(key=key, principal=key, see_all=see_all), chosen, self._a2a)
        own = await self._store.find_by_session_key(key)
        # A session that is not stored belongs to nobody: it sees nothing.
        principal = principal_of_owner(own.ownership.owner_session_key) if own else ""
        agent_id = own.ownership.agent_id if own else ""
        return _Viewer(Requester(key=key, principal=principal, agent_id=agent_id,
                                 see_all=see_all), chosen, self._a2a)

    async def _visible(self, viewer: _Viewer, session_id: str, action: str,
                       context: Ctx) -> SessionRecord:
        """The row of ``session_id`` if ``viewer`` may ``action`` it; else NOT_FOUND, the
        very answer a missing row gets."""
        rec = await self._get(session_id, context)
        if not viewer.sees(rec, action):
            log.info("session_access_denied", session_id=session_id, action=action,
                     visibility=viewer.visibility)
            await abort(context, grpc.StatusCode.NOT_FOUND, str(SessionNotFound(session_id)))
        return rec

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Ctx
    ) -> pb.ListSessionsResponse:
        """Visible rows, newest activity first, paginated by an opaque cursor."""
        viewer = await self._viewer(request.requester_session_key, request.visibility, context,
                                    operator=request.operator,
                                    see_all=request.see_all_principals)
        limit = request.limit if request.limit > 0 else DEFAULT_PAGE
        limit = min(limit, MAX_PAGE)
        after: tuple[int, str] | None = None
        if request.cursor:
            try:
                after = decode_cursor(request.cursor)
            except ValueError as exc:
                await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        picked: list[SessionRecord] = []
        more = False
        while not more:
            page = await self._store.list_sessions(cwd=request.cwd, after=after, limit=limit + 1)
            for rec in page:
                if not viewer.sees(rec) or not matches_query(rec, request.query):
                    continue
                if len(picked) == limit:
                    more = True
                    break
                picked.append(rec)
            if len(page) < limit + 1:
                break
            after = (page[-1].last_activity, page[-1].session_id)
        return pb.ListSessionsResponse(
            sessions=[row_to_pb(r) for r in picked],
            next_cursor=encode_cursor(picked[-1]) if more and picked else "",
        )

    async def GetHistory(
        self, request: pb.GetHistoryRequest, context: Ctx
    ) -> AsyncIterator[pb.HistoryPage]:
        """The history of a session the requester may see, in pages (with ``limit``:
        only the newest items, sent once the whole history has been read)."""
        viewer = await self._viewer(request.requester_session_key, request.visibility, context,
                                    operator=request.operator,
                                    see_all=request.see_all_principals)
        await self._visible(viewer, request.session_id, "history", context)
        if request.limit <= 0:
            async for page in self._history_pages(request.session_id, 0, context):
                yield page
            return
        newest: collections.deque[pb.HistoryItem] = collections.deque(maxlen=request.limit)
        async for page in self._history_pages(request.session_id, 0, context):
            newest.extend(page.items)
        for page in cut_pages(newest):
            yield page

    async def SessionStatus(
        self, request: pb.SessionStatusRequest, context: Ctx
    ) -> pb.SessionStatusResponse:
        """Row and message count of a session the requester may see."""
        viewer = await self._viewer(request.requester_session_key, request.visibility, context,
                                    operator=request.operator,
                                    see_all=request.see_all_principals)
        rec = await self._visible(viewer, request.session_id, "status", context)
        return pb.SessionStatusResponse(session=row_to_pb(rec), message_count=rec.message_count)

    async def CheckAccess(
        self, request: pb.CheckAccessRequest, context: Ctx
    ) -> pb.CheckAccessResponse:
        """The SPEC §14 check for one action, as a yes/no with a reason."""
        action = action_from_pb(request.action)
        if action is None:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT,
                "action must be LIST, HISTORY, SEND or STATUS",
            )
        viewer = await self._viewer(request.requester_session_key, request.visibility, context,
                                    operator=request.operator,
                                    see_all=request.see_all_principals)
        if viewer.requester.operator:  # the operator: a missing row is NOT_FOUND
            await self._get(request.session_id, context)
            return pb.CheckAccessResponse(allowed=True)
        try:
            rec = await self._store.get_session(request.session_id)
        except SessionNotFound:
            rec = None
        if rec is not None and viewer.sees(rec, action):
            return pb.CheckAccessResponse(allowed=True)
        # Hidden or missing: the same answer, so a requester cannot probe for rows.
        log.info("session_access_denied", session_id=request.session_id, action=action,
                 visibility=viewer.visibility)
        return pb.CheckAccessResponse(
            allowed=False, reason=str(SessionNotFound(request.session_id)))
