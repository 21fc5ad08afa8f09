"""The gRPC face of the session service: every RPC of ``acpgate.session.v1.SessionService``.

Error mapping (see the proto): INVALID_ARGUMENT carries the exact client-facing
SPEC message as its details (the edge forwards it verbatim as -32602),
NOT_FOUND an unknown session, PERMISSION_DENIED a visibility refusal,
ALREADY_EXISTS a duplicate session id, FAILED_PRECONDITION a restore while the
store runs in memory.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from acpgate.session.v1 import session_pb2 as pb
from acpgate.session.v1 import session_pb2_grpc
from services.common.config import VISIBILITY_LEVELS, Config
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.common.protocol import MSG_UNKNOWN_AGENT
from services.session.aliases import (
    AgentLaunch,
    AliasError,
    launch_spec,
    resolve_alias,
    resolve_restore_alias,
)
from services.session.history_pages import cut_pages
from services.session.policy import SecurityPolicy, policy_for
from services.session.store import (
    HistoryEntry,
    InvalidItem,
    SessionExists,
    SessionNotFound,
    SessionRecord,
    SessionStore,
)
from services.session.visibility import A2aPolicy, VisibilityRow, can_see_session_row
from services.session.workspace import WorkspaceError, resolve_workspace

__all__ = ["SessionServicer"]

log = get_logger("session.servicer")

Ctx = grpc.aio.ServicerContext[Any, Any]

DEFAULT_PAGE = 100
MAX_PAGE = 1000

_ROLE_TO_STR = {
    pb.HistoryItem.ROLE_USER: "user",
    pb.HistoryItem.ROLE_ASSISTANT: "assistant",
    pb.HistoryItem.ROLE_THOUGHT: "thought",
    pb.HistoryItem.ROLE_TOOL_CALL: "tool_call",
    pb.HistoryItem.ROLE_TOOL_RESULT: "tool_result",
}
_STR_TO_ROLE = {v: k for k, v in _ROLE_TO_STR.items()}
_STATE_TO_STR = {pb.SESSION_STATE_ACTIVE: "active", pb.SESSION_STATE_INACTIVE: "inactive"}
_STR_TO_STATE = {v: k for k, v in _STATE_TO_STR.items()}
_ACTION_TO_STR = {
    pb.ACTION_LIST: "list",
    pb.ACTION_HISTORY: "history",
    pb.ACTION_SEND: "send",
    pb.ACTION_STATUS: "status",
}


# ------------------------------------------------------------------ conversions


def row_to_pb(rec: SessionRecord) -> pb.SessionRow:
    """A store record as the proto ``SessionRow``."""
    o = rec.ownership
    return pb.SessionRow(
        session_id=rec.session_id,
        agent_alias=rec.agent_alias,
        workspace_dir=rec.workspace_dir,
        created_at=rec.created_at,
        last_activity=rec.last_activity,
        token_count=rec.token_count,
        plan_json=rec.plan_json,
        state=_STR_TO_STATE.get(rec.state, pb.SESSION_STATE_UNSPECIFIED),
        lease_id=rec.lease_id,
        adapter_session_id=rec.adapter_session_id,
        title=rec.title,
        ownership=pb.Ownership(
            session_key=o.session_key,
            spawned_by=o.spawned_by,
            parent_session_key=o.parent_session_key,
            owner_session_key=o.owner_session_key,
            agent_id=o.agent_id,
            backend=o.backend,
            gateway_instance_id=o.gateway_instance_id,
            created_at=o.created_at,
        ),
    )


def entry_to_pb(e: HistoryEntry) -> pb.HistoryItem:
    """A stored history entry as the proto ``HistoryItem``."""
    return pb.HistoryItem(
        seq=e.seq,
        turn=e.turn,
        role=_STR_TO_ROLE.get(e.role, pb.HistoryItem.ROLE_UNSPECIFIED),
        text=e.text,
        tool_call_id=e.tool_call_id,
        tool_name=e.tool_name,
        tool_kind=e.tool_kind,
        title=e.title,
        arguments_json=e.arguments_json,
        output=e.output,
        status=e.status,
        content_json=e.content_json,
        created_at=e.created_at,
    )


def pb_to_entry(item: pb.HistoryItem) -> HistoryEntry:
    """A proto ``HistoryItem`` as a store entry (an unspecified role stays invalid: "")."""
    return HistoryEntry(
        role=_ROLE_TO_STR.get(item.role, ""),
        text=item.text,
        tool_call_id=item.tool_call_id,
        tool_name=item.tool_name,
        tool_kind=item.tool_kind,
        title=item.title,
        arguments_json=item.arguments_json,
        output=item.output,
        status=item.status,
        content_json=item.content_json,
    )


def launch_to_pb(launch: AgentLaunch) -> pb.ResolvedAgent:
    """A launch spec as the proto ``ResolvedAgent``."""
    return pb.ResolvedAgent(
        alias=launch.alias,
        kind=launch.kind,
        command=launch.command,
        args=list(launch.args),
        env=dict(launch.env),
        agent_workspace=launch.agent_workspace,
        autonomy=launch.autonomy,
        default_model=launch.default_model,
    )


def policy_to_pb(p: SecurityPolicy) -> pb.SecurityPolicy:
    """The policy dataclass as the proto ``SecurityPolicy``."""
    return pb.SecurityPolicy(
        workspace_dir=p.workspace_dir,
        allowed_roots=list(p.allowed_roots),
        forbidden_paths=list(p.forbidden_paths),
        autonomy=p.autonomy,
        auto_approve=list(p.auto_approve),
        always_ask=list(p.always_ask),
        workspace_only=p.workspace_only,
    )


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


def encode_cursor(rec: SessionRecord) -> str:
    """An opaque cursor after ``rec`` in (last_activity DESC, id DESC) order."""
    raw = json.dumps([rec.last_activity, rec.session_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """The position a cursor names; ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        raise ValueError("invalid cursor") from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], int)
        or not isinstance(value[1], str)
    ):
        raise ValueError("invalid cursor")
    return value[0], value[1]


def _workspace_failed(alias: str, exc: OSError) -> str:
    """The FAILED_PRECONDITION message when an agent workspace cannot be created."""
    return f"cannot create the workspace of agent {alias}: {exc.strerror or exc}"


# ------------------------------------------------------------------ the servicer


class _Viewer:
    """Who is asking, under which visibility (None requester = the local operator)."""

    def __init__(self, key: str, visibility: str, a2a: A2aPolicy, agent_id: str | None) -> None:
        self.key = key
        self.visibility = visibility
        self.a2a = a2a
        self.agent_id = agent_id

    def sees(self, rec: SessionRecord) -> bool:
        """The SPEC §14 check of one row; the local operator (no requester key) sees every row."""
        if not self.key:
            return True
        return can_see_session_row(
            visibility_row(rec),
            self.key,
            self.visibility,
            self.a2a,
            requester_agent_id=self.agent_id,
        )


class SessionServicer(session_pb2_grpc.SessionServiceServicer):
    """Implements ``SessionService`` over a :class:`SessionStore` and the config."""

    def __init__(self, cfg: Config, store: SessionStore) -> None:
        self._cfg = cfg
        self._store = store
        self._a2a = A2aPolicy(enabled=cfg.a2a.enabled, allow=tuple(cfg.a2a.allow))

    # -- helpers

    async def _get(self, session_id: str, context: Ctx) -> SessionRecord:
        if not session_id:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "session_id is required")
        try:
            return await self._store.get_session(session_id)
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))

    async def _viewer(self, key: str, visibility: str, context: Ctx) -> _Viewer:
        chosen = visibility or self._cfg.sessions.visibility
        if chosen not in VISIBILITY_LEVELS:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown visibility {chosen!r} (expected one of {', '.join(VISIBILITY_LEVELS)})",
            )
        agent_id: str | None = None
        if key:
            own = await self._store.find_by_session_key(key)
            if own is not None and own.ownership.agent_id:
                agent_id = own.ownership.agent_id
        return _Viewer(key, chosen, self._a2a, agent_id)

    async def _visible(
        self, key: str, visibility: str, session_id: str, action: str, context: Ctx
    ) -> SessionRecord:
        viewer = await self._viewer(key, visibility, context)
        rec = await self._get(session_id, context)
        if not viewer.sees(rec):
            log.info("session_access_denied", session_id=session_id, action=action,
                     visibility=viewer.visibility)
            await abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"session {session_id} is not visible to {key} ({action}, "
                f"visibility {viewer.visibility})",
            )
        return rec

    async def _launch(self, alias: str, context: Ctx) -> pb.ResolvedAgent:
        try:
            return launch_to_pb(await launch_spec(self._cfg, alias))
        except AliasError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, _workspace_failed(alias, exc))

    async def _require_alias(self, alias: str, context: Ctx) -> None:
        if alias not in self._cfg.agents:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, MSG_UNKNOWN_AGENT.format(alias=alias)
            )

    # -- store status and agents

    async def GetStoreStatus(
        self, request: pb.GetStoreStatusRequest, context: Ctx
    ) -> pb.StoreStatus:
        """Persistent or in memory, and why (SPEC §2)."""
        s = self._store.status
        return pb.StoreStatus(
            persistent=s.persistent,
            db_path=s.db_path,
            fallback_reason=s.fallback_reason,
            schema_version=s.schema_version,
        )

    async def ResolveAgent(
        self, request: pb.ResolveAgentRequest, context: Ctx
    ) -> pb.ResolvedAgent:
        """The SPEC §3 alias chain and dispatchability check."""
        try:
            alias = resolve_alias(self._cfg, request.explicit_alias, request.connection_default)
        except AliasError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return await self._launch(alias, context)

    async def ResolveRestoreAgent(
        self, request: pb.ResolveRestoreAgentRequest, context: Ctx
    ) -> pb.ResolvedAgent:
        """The SPEC §8 restore chain for a stored session."""
        if not self._store.persistent:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session store is in memory ({self._store.status.fallback_reason}); "
                "sessions cannot be restored",
            )
        rec = await self._get(request.session_id, context)
        try:
            alias = resolve_restore_alias(self._cfg, rec.agent_alias)
        except AliasError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return await self._launch(alias, context)

    async def ResolveWorkspace(
        self, request: pb.ResolveWorkspaceRequest, context: Ctx
    ) -> pb.ResolvedWorkspace:
        """The SPEC §3 cwd rules."""
        await self._require_alias(request.alias, context)
        try:
            info = await resolve_workspace(self._cfg, request.alias, request.cwd, request.base_dir)
        except WorkspaceError as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except OSError as exc:
            await abort(
                context, grpc.StatusCode.FAILED_PRECONDITION, _workspace_failed(request.alias, exc)
            )
        return pb.ResolvedWorkspace(
            workspace_dir=info.workspace_dir, is_agent_workspace=info.is_agent_workspace
        )

    async def GetPolicy(self, request: pb.GetPolicyRequest, context: Ctx) -> pb.SecurityPolicy:
        """The SPEC §12 policy for an alias and a session workspace."""
        await self._require_alias(request.alias, context)
        if not request.workspace_dir:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT, "workspace_dir is required"
            )
        return policy_to_pb(policy_for(self._cfg, request.alias, request.workspace_dir))

    # -- rows

    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: Ctx
    ) -> pb.SessionRow:
        """Write a new row with SPEC §13 ownership."""
        try:
            rec = await self._store.create_session(
                request.session_id,
                request.agent_alias,
                request.workspace_dir,
                spawned_by=request.spawned_by,
                parent_session_key=request.parent_session_key,
                owner_session_key=request.owner_session_key,
                gateway_instance_id=request.gateway_instance_id,
            )
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionExists as exc:
            await abort(context, grpc.StatusCode.ALREADY_EXISTS, str(exc))
        log.info("session_created", session_id=rec.session_id, agent=rec.agent_alias)
        return row_to_pb(rec)

    async def GetSession(self, request: pb.GetSessionRequest, context: Ctx) -> pb.SessionRow:
        """One row (trusted callers; no visibility check)."""
        return row_to_pb(await self._get(request.session_id, context))

    async def UpdateSession(
        self, request: pb.UpdateSessionRequest, context: Ctx
    ) -> pb.SessionRow:
        """Change the fields that are set."""
        state: str | None = None
        if request.HasField("state"):
            if request.state not in _STATE_TO_STR:
                await abort(
                    context, grpc.StatusCode.INVALID_ARGUMENT, "state must be ACTIVE or INACTIVE"
                )
            state = _STATE_TO_STR[request.state]

        def opt(name: str) -> str | None:
            return str(getattr(request, name)) if request.HasField(name) else None  # type: ignore[arg-type]

        try:
            rec = await self._store.update_session(
                request.session_id,
                state=state,
                lease_id=opt("lease_id"),
                adapter_session_id=opt("adapter_session_id"),
                plan_json=opt("plan_json"),
                agent_alias=opt("agent_alias"),
                title=opt("title"),
            )
        except InvalidItem as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        return row_to_pb(rec)

    async def TouchSession(self, request: pb.TouchSessionRequest, context: Ctx) -> pb.SessionRow:
        """Bump last_activity."""
        try:
            return row_to_pb(await self._store.touch(request.session_id))
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))

    async def AppendTurn(
        self, request: pb.AppendTurnRequest, context: Ctx
    ) -> pb.AppendTurnResponse:
        """One completed turn in one transaction (SPEC §8)."""
        try:
            result = await self._store.append_turn(
                request.session_id,
                [pb_to_entry(i) for i in request.items],
                token_delta=request.token_delta,
                plan_json=request.plan_json if request.HasField("plan_json") else None,
            )
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except InvalidItem as exc:
            log.warning("turn_rejected", session_id=request.session_id, reason=str(exc))
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.AppendTurnResponse(
            turn=result.turn, first_seq=result.first_seq, last_seq=result.last_seq
        )

    async def _stream(
        self, session_id: str, after_seq: int, context: Ctx
    ) -> AsyncIterator[pb.HistoryPage]:
        # Each store read goes out at once as one or more pages (never one item per message).
        try:
            async for rows in self._store.iter_history_pages(session_id, after_seq=after_seq):
                for page in cut_pages(entry_to_pb(entry) for entry in rows):
                    yield page
        except SessionNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))

    async def StreamHistory(
        self, request: pb.StreamHistoryRequest, context: Ctx
    ) -> AsyncIterator[pb.HistoryPage]:
        """The stored conversation, oldest first, in pages (trusted callers)."""
        await self._get(request.session_id, context)
        async for page in self._stream(request.session_id, request.after_seq, context):
            yield page

    # -- visibility-filtered reads (SPEC §14)

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Ctx
    ) -> pb.ListSessionsResponse:
        """Visible rows, newest activity first, paginated by an opaque cursor."""
        viewer = await self._viewer(request.requester_session_key, request.visibility, context)
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
                if not viewer.sees(rec):
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
        """The history of a session the requester may see, in pages."""
        await self._visible(
            request.requester_session_key, request.visibility, request.session_id, "history",
            context,
        )
        async for page in self._stream(request.session_id, 0, context):
            yield page

    async def SessionStatus(
        self, request: pb.SessionStatusRequest, context: Ctx
    ) -> pb.SessionStatusResponse:
        """Row and message count of a session the requester may see."""
        rec = await self._visible(
            request.requester_session_key, request.visibility, request.session_id, "status",
            context,
        )
        return pb.SessionStatusResponse(session=row_to_pb(rec), message_count=rec.message_count)

    async def CheckAccess(
        self, request: pb.CheckAccessRequest, context: Ctx
    ) -> pb.CheckAccessResponse:
        """The SPEC §14 check for one action, as a yes/no with a reason."""
        action = _ACTION_TO_STR.get(request.action)
        if action is None:
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT,
                "action must be LIST, HISTORY, SEND or STATUS",
            )
        viewer = await self._viewer(request.requester_session_key, request.visibility, context)
        rec = await self._get(request.session_id, context)
        if viewer.sees(rec):
            return pb.CheckAccessResponse(allowed=True)
        return pb.CheckAccessResponse(
            allowed=False,
            reason=f"visibility {viewer.visibility} does not let {viewer.key} {action} "
            f"session {request.session_id}",
        )
