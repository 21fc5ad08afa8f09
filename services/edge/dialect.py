"""The client-facing ACP dialect of one connection (SPEC §1–§9).

:class:`DialectConnection` receives raw lines/frames, classifies them (SPEC §1),
routes responses to the back-channel, and runs every request and notification
in its own task so a ``session/cancel`` is answered while a prompt streams.
Each handler validates in the order the SPEC gives and answers exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import orjson

from acpgate.lifecycle.v1 import lifecycle_pb2
from acpgate.session.v1 import session_pb2
from services.common.logs import get_logger
from services.common.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    M_AUTHENTICATE,
    M_INITIALIZE,
    M_SESSION_CANCEL,
    M_SESSION_CLOSE,
    M_SESSION_EVENT,
    M_SESSION_LIST,
    M_SESSION_LOAD,
    M_SESSION_NEW,
    M_SESSION_PROMPT,
    M_SESSION_RESUME,
    M_SESSION_STOP,
    M_SESSION_UPDATE,
    META_ZEROCLAW,
    METHOD_NOT_FOUND,
    MSG_METHOD_NOT_FOUND,
    MSG_MISSING_SESSION_ID,
    MSG_SESSION_ALREADY_ACTIVE,
    MSG_SESSION_BUSY,
    MSG_SESSION_LIMIT,
    MSG_SESSION_NOT_FOUND,
    PROTOCOL_VERSION,
    SESSION_BUSY,
    SESSION_LIMIT,
    SESSION_NOT_FOUND,
    U_PLAN,
)
from services.edge import blobs
from services.edge.adapter import AdapterClient
from services.edge.backchannel import BackChannel
from services.edge.framing import (
    Frame,
    FrameKind,
    JsonRpcError,
    classify,
    error_line,
    notification_line,
    result_line,
)
from services.edge.runtime import EdgeRuntime
from services.edge.session import EdgeSession
from services.edge.turn import history_meta, replay_updates, transcript

log = get_logger("edge.dialect")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


def _first_str(params: dict[str, Any], *keys: str) -> str | None:
    """The first present key's value (SPEC §1 aliases); non-strings count as absent."""
    for key in keys:
        value = params.get(key)
        if isinstance(value, str):
            return value
    return None


#: Session ids are UUIDs; anything much longer cannot name a session, and
#: must not reach the services (a huge id in a gRPC status overflows its header).
MAX_SESSION_ID_CHARS = 128

#: The visibility an authenticated gateway client gets: its own sessions only.
PRINCIPAL_VISIBILITY = "tree"


def _session_id(params: dict[str, Any]) -> str:
    sid = _first_str(params, "sessionId", "session_id")
    if not sid:
        raise JsonRpcError(INVALID_PARAMS, MSG_MISSING_SESSION_ID)
    if len(sid) > MAX_SESSION_ID_CHARS:
        raise _not_found(sid)
    return sid


def _not_found(sid: str) -> JsonRpcError:
    return JsonRpcError(SESSION_NOT_FOUND, MSG_SESSION_NOT_FOUND.format(session_id=sid))


def _grpc_error(exc: grpc.aio.AioRpcError, sid: str = "") -> JsonRpcError:
    """Map a session-service refusal onto the dialect (messages forwarded verbatim)."""
    code = exc.code()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return JsonRpcError(INVALID_PARAMS, exc.details() or "Invalid params")
    if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION) and sid:
        return _not_found(sid)
    if code == grpc.StatusCode.FAILED_PRECONDITION:  # e.g. the agent workspace cannot be created
        return JsonRpcError(INTERNAL_ERROR, exc.details() or "Internal error")
    log.error("service_call_failed", code=code.name, detail=exc.details())
    return JsonRpcError(INTERNAL_ERROR, f"Internal error: service call failed ({code.name})")


#: Replayed updates written per hold of the send lock (session/load).
_REPLAY_CHUNK = 500


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")


class DialectConnection:
    """One client connection speaking the dialect (stdio or one WebSocket)."""

    def __init__(self, runtime: EdgeRuntime, send: Callable[[str], Awaitable[None]],
                 *, default_agent: str = "", principal: str = "") -> None:
        self.runtime = runtime
        #: Who this connection acts as ("" = the local operator; see serve_connection).
        self.principal = principal
        self._raw_send = send
        self._send_lock = asyncio.Lock()
        self.default_agent = default_agent.strip()
        self.backchannel = BackChannel(self.send)
        self.client_capabilities: dict[str, Any] = {}
        self.sessions: dict[str, EdgeSession] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._handlers: dict[str, Handler] = {
            M_INITIALIZE: self.initialize,
            M_AUTHENTICATE: self.authenticate,
            M_SESSION_NEW: self.session_new,
            M_SESSION_PROMPT: self.session_prompt,
            M_SESSION_CANCEL: self.session_cancel,
            M_SESSION_STOP: self.session_stop,
            M_SESSION_CLOSE: self.session_close,
            M_SESSION_LOAD: self.session_load,
            M_SESSION_RESUME: self.session_resume,
            M_SESSION_LIST: self.session_list,
            M_SESSION_UPDATE: self.session_event,
            M_SESSION_EVENT: self.session_event,
        }

    # ------------------------------------------------------------------ I/O

    async def send(self, line: str) -> None:
        """Write one message; a gone client raises ConnectionError."""
        await self.send_many([line])

    async def send_many(self, lines: list[str]) -> None:
        """Write several messages in order under one hold of the send lock (a replay
        of thousands of updates pays the lock once, not per line); a gone client raises
        ConnectionError."""
        if self._closed:
            raise ConnectionError("client connection closed")
        async with self._send_lock:
            for line in lines:
                await self._raw_send(line)

    async def _answer(self, line: str, code: int | None = None) -> None:
        if code is not None:
            self.runtime.metrics.count_error(code)
        try:
            await self.send(line)
        except (ConnectionError, OSError):
            log.debug("answer_dropped_client_gone")

    def feed(self, line: str) -> None:
        """Handle one inbound line (never raises, never blocks)."""
        frame = classify(line)
        if frame.kind is FrameKind.SKIP:
            return
        if frame.kind is FrameKind.RESPONSE:
            self.backchannel.on_response(frame.message)
            return
        if frame.kind is FrameKind.ERROR:
            self._start(self._answer(error_line(frame.id, frame.error_code, frame.error_message),
                                     frame.error_code))
            return
        self._start(self._dispatch(frame))

    def _start(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dispatch(self, frame: Frame) -> None:
        is_request = frame.kind is FrameKind.REQUEST
        handler = self._handlers.get(frame.method)
        try:
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, MSG_METHOD_NOT_FOUND.format(method=frame.method))
            result = await handler(frame.params)
        except JsonRpcError as exc:
            if is_request:
                await self._answer(error_line(frame.id, exc.code, exc.message), exc.code)
            return
        except asyncio.CancelledError:
            if is_request and not self._closed:
                await self._answer(error_line(frame.id, INTERNAL_ERROR, "Request cancelled"),
                                   INTERNAL_ERROR)
            raise
        except Exception:
            log.exception("handler_failed", method=frame.method)
            if is_request:
                await self._answer(error_line(frame.id, INTERNAL_ERROR, "Internal error"),
                                   INTERNAL_ERROR)
            return
        if is_request:
            await self._answer(result_line(frame.id, result))

    async def close(self, *, drain_secs: float = 15.0,
                    abort: asyncio.Event | None = None) -> None:
        """The client's input ended: finish what it asked, then release its sessions.

        Back-channel requests fail at once (nobody can answer them any more:
        the tools they guard are denied). Requests already read run on for up
        to ``drain_secs`` — a stdio client or CI runner may close stdin and
        keep reading — or until ``abort`` is set; then they are cancelled.
        Only after that are the connection's sessions released (adapters
        closed, rows kept), so a request still running never loses its session.
        """
        self.backchannel.close()
        if self._tasks:
            waiting = asyncio.ensure_future(asyncio.wait(list(self._tasks), timeout=drain_secs))
            watchers: set[asyncio.Future[Any]] = {waiting}
            if abort is not None:
                watchers.add(asyncio.ensure_future(abort.wait()))
            await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
            for watcher in watchers:
                watcher.cancel()
            pending = [t for t in self._tasks if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await self._release_all()
        self._closed = True

    async def _release_all(self) -> None:
        sessions = list(self.sessions.values())
        self.sessions.clear()
        await asyncio.gather(*(self.runtime.deactivate(s, "disconnect") for s in sessions),
                             return_exceptions=True)

    # ------------------------------------------------------------------ helpers

    def _active(self, sid: str) -> EdgeSession:
        session = self.sessions.get(sid)
        if session is None or session.released or \
                self.runtime.registry.active.get(sid) is not session:
            self.sessions.pop(sid, None)
            raise _not_found(sid)
        return session

    async def _visible_row(self, sid: str) -> session_pb2.SessionRow:
        """The stored row of ``sid`` if this connection may see it, else -32000.

        The local operator reads any row; an authenticated gateway client only
        its own (§14 "tree" over the row's owner), and another client's session
        is reported exactly like one that does not exist.
        """
        stub = self.runtime.session_stub
        try:
            if not self.principal:
                return await stub.GetSession(session_pb2.GetSessionRequest(session_id=sid))
            status = await stub.SessionStatus(session_pb2.SessionStatusRequest(
                requester_session_key=self.principal, session_id=sid,
                visibility=PRINCIPAL_VISIBILITY))
            return status.session
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED):
                raise _not_found(sid) from None
            raise _grpc_error(exc, sid) from None

    async def _policy(self, alias: str, workspace_dir: str) -> dict[str, Any]:
        from services.common.policy import SecurityPolicy

        p = await self.runtime.session_stub.GetPolicy(
            session_pb2.GetPolicyRequest(alias=alias, workspace_dir=workspace_dir))
        return SecurityPolicy.from_proto(p).to_json()

    async def _spawn_adapter(self, session: EdgeSession,
                             agent: session_pb2.ResolvedAgent) -> AdapterClient:
        """Ensure a lease, attach, initialize. On failure the lease is closed again."""
        rt = self.runtime
        try:
            resp = await rt.lifecycle_stub.EnsureSession(lifecycle_pb2.EnsureSessionRequest(
                session_key=session.session_key, command=agent.command, args=list(agent.args),
                env=dict(agent.env), cwd=session.workspace_dir))
        except grpc.aio.AioRpcError as exc:
            raise _start_failed(agent.alias, exc) from None
        session.lease_id = resp.lease.lease_id
        client = AdapterClient(rt.lifecycle_stub, session.lease_id, session.session_id, session)
        session.adapter = client
        try:
            await client.start(self.client_capabilities, rt.implementation)
        except Exception as exc:
            await self._abandon(session)
            raise _start_failed(agent.alias, exc) from None
        return client

    async def _abandon(self, session: EdgeSession) -> None:
        await self.runtime.release(session, "failed")

    # ------------------------------------------------------------------ §2

    async def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §2: always protocol 1; remembers the client's capabilities."""
        caps = params.get("clientCapabilities")
        self.client_capabilities = caps if isinstance(caps, dict) else {}
        rt = self.runtime
        zeroclaw: dict[str, Any] = {}
        try:
            agent = await rt.session_stub.ResolveAgent(session_pb2.ResolveAgentRequest(
                connection_default=self.default_agent))
            if agent.default_model:
                zeroclaw["defaultModel"] = agent.default_model
        except grpc.aio.AioRpcError:
            pass  # no resolvable default agent: defaultModel omitted
        zeroclaw["maxSessions"] = rt.cfg.acp.max_sessions
        zeroclaw["sessionTimeoutSecs"] = rt.cfg.acp.session_timeout_secs
        persistent = rt.persistent
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": persistent,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": ({"resume": {}, "close": {}, "list": {}}
                                        if persistent else {}),
            },
            "agentInfo": rt.implementation,
            "authMethods": [],
            "_meta": {META_ZEROCLAW: zeroclaw},
        }

    async def authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        """No auth methods are advertised; authenticate is a no-op."""
        return {}

    # ------------------------------------------------------------------ §3

    async def session_new(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §3: alias chain, cwd rules, limit, row, adapter."""
        rt = self.runtime
        alias = ""
        for key in ("agentAlias", "agent_alias", "agent"):
            value = params.get(key)
            if isinstance(value, str) and value.strip():
                alias = value.strip()
                break
        cwd = _first_str(params, "cwd", "workspaceDir", "workspace_dir") or ""
        try:
            agent = await rt.session_stub.ResolveAgent(session_pb2.ResolveAgentRequest(
                explicit_alias=alias, connection_default=self.default_agent))
            ws = await rt.session_stub.ResolveWorkspace(session_pb2.ResolveWorkspaceRequest(
                alias=agent.alias, cwd=cwd, base_dir=os.getcwd()))
        except grpc.aio.AioRpcError as exc:
            raise _grpc_error(exc) from None
        if not rt.registry.try_reserve():
            raise JsonRpcError(SESSION_LIMIT, MSG_SESSION_LIMIT.format(max=rt.cfg.acp.max_sessions))
        try:
            sid = str(uuid.uuid4())
            try:
                row = await rt.session_stub.CreateSession(session_pb2.CreateSessionRequest(
                    session_id=sid, agent_alias=agent.alias, workspace_dir=ws.workspace_dir,
                    gateway_instance_id=rt.gateway_instance_id,
                    owner_session_key=self.principal))
                policy = await self._policy(agent.alias, ws.workspace_dir)
            except grpc.aio.AioRpcError as exc:
                raise _grpc_error(exc) from None
            session = EdgeSession(rt, self, row, rt.clock)
            client = await self._spawn_adapter(session, agent)
            try:
                adapter_sid = await client.new_session(ws.workspace_dir, _mcp_servers(params),
                                                       policy)
            except Exception as exc:
                await self._abandon(session)
                raise _start_failed(agent.alias, exc) from None
            await self._mark_active(session, adapter_sid)
        finally:
            rt.registry.unreserve()
        return {"sessionId": sid, "workspaceDir": ws.workspace_dir}

    async def _mark_active(self, session: EdgeSession, adapter_sid: str,
                           alias: str | None = None) -> None:
        request = session_pb2.UpdateSessionRequest(
            session_id=session.session_id, state=session_pb2.SESSION_STATE_ACTIVE,
            lease_id=session.lease_id, adapter_session_id=adapter_sid)
        if alias is not None:
            request.agent_alias = alias
        try:
            await self.runtime.session_stub.UpdateSession(request)
        except grpc.aio.AioRpcError as exc:
            log.warning("mark_active_failed", session_id=session.session_id, code=exc.code().name)
        if session.released:  # the adapter died during setup
            raise JsonRpcError(INTERNAL_ERROR, "Agent exited during session setup")
        if self._closed:  # close() already released this connection's sessions
            await self.runtime.release(session, "disconnect")
            raise JsonRpcError(INTERNAL_ERROR, "Connection closed during session setup")
        self.runtime.activate(session)
        self.sessions[session.session_id] = session
        session.touch()

    # ------------------------------------------------------------------ §4

    async def session_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §4: id, active, busy (slot before blobs), prompt, then the turn."""
        sid = _session_id(params)
        session = self._active(sid)
        turn = session.reserve_turn()
        if turn is None:
            raise JsonRpcError(SESSION_BUSY, MSG_SESSION_BUSY.format(session_id=sid))
        try:
            plan = blobs.parse_prompt(params.get("prompt"))
            if plan.blobs:
                text = await asyncio.to_thread(blobs.materialize, plan, session.workspace_dir)
            else:
                text = blobs.materialize(plan, session.workspace_dir)
            return await session.run_turn(turn, text)
        finally:
            session.release_turn(turn)

    # ------------------------------------------------------------------ §7

    async def session_cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §7: interrupt the running turn; idle or unknown → {}."""
        sid = _session_id(params)  # a request without one is -32602 (§1); notifications: silence
        session = self.sessions.get(sid)
        if session is not None:
            session.touch()
            session.cancel()
        return {}

    async def session_stop(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §7: leave the active set now, let the turn finish, release."""
        sid = _session_id(params)
        session = self._active(sid)
        self.runtime.remove(session)
        self.sessions.pop(sid, None)
        await session.wait_turn()
        await self.runtime.release(session, "stop")
        return {"sessionId": sid, "stopped": True}

    async def session_close(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §7: cancel the turn, leave the active set, wait, release."""
        sid = _session_id(params)
        session = self._active(sid)
        self.runtime.remove(session)
        self.sessions.pop(sid, None)
        session.cancel()
        await session.wait_turn()
        await self.runtime.release(session, "close")
        return {}

    # ------------------------------------------------------------------ §8

    async def session_load(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §8: restore and replay the stored history."""
        return await self._restore(params, replay=True)

    async def session_resume(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §8: restore; replay only the stored plan."""
        return await self._restore(params, replay=False)

    async def _restore(self, params: dict[str, Any], *, replay: bool) -> dict[str, Any]:
        rt = self.runtime
        sid = _session_id(params)
        if not rt.persistent:
            raise _not_found(sid)
        if not rt.registry.try_reserve():
            raise JsonRpcError(SESSION_LIMIT, MSG_SESSION_LIMIT.format(max=rt.cfg.acp.max_sessions))
        claimed = False
        try:
            if sid in rt.registry.active or sid in rt.registry.restoring:
                raise JsonRpcError(INVALID_PARAMS, MSG_SESSION_ALREADY_ACTIVE.format(session_id=sid))
            rt.registry.restoring.add(sid)
            claimed = True
            row = await self._visible_row(sid)
            try:
                agent = await rt.session_stub.ResolveRestoreAgent(
                    session_pb2.ResolveRestoreAgentRequest(session_id=sid))
                policy = await self._policy(agent.alias, row.workspace_dir)
            except grpc.aio.AioRpcError as exc:
                raise _grpc_error(exc, sid) from None
            # The history streams in while the adapter starts (both take tens of ms).
            history = asyncio.create_task(self._history(sid))
            session = EdgeSession(rt, self, row, rt.clock)
            session.alias = agent.alias
            if agent.alias != row.agent_alias:  # restored onto another agent: a new key
                session.session_key = f"agent:{agent.alias}:acp:{sid}"
            try:
                client = await self._spawn_adapter(session, agent)
            except BaseException:
                history.cancel()
                with contextlib.suppress(BaseException):
                    await history
                raise
            try:
                items = await history
            except grpc.aio.AioRpcError as exc:
                await self._abandon(session)
                raise _grpc_error(exc, sid) from None
            mcp = _mcp_servers(params)
            try:
                if agent.kind == "builtin":
                    adapter_sid = row.adapter_session_id or sid
                    await client.resume_builtin(adapter_sid, row.workspace_dir, mcp, policy,
                                                history_meta(items))
                else:
                    native = agent.alias == row.agent_alias and await client.restore_external(
                        row.adapter_session_id, row.workspace_dir, mcp)
                    if native:
                        adapter_sid = row.adapter_session_id
                    else:
                        adapter_sid = await client.new_session(row.workspace_dir, mcp, policy)
                        session.pending_history = transcript(items) or None
            except Exception as exc:
                await self._abandon(session)
                raise JsonRpcError(INTERNAL_ERROR,
                                   f"Failed to restore session: {_cause(exc)}") from None
            if replay:
                lines = [notification_line(M_SESSION_UPDATE, {"sessionId": sid, "update": u})
                         for u in replay_updates(items)]
                with contextlib.suppress(ConnectionError, OSError):
                    # Chunks, so other sessions on this connection still get a turn.
                    for start in range(0, len(lines), _REPLAY_CHUNK):
                        await self.send_many(lines[start:start + _REPLAY_CHUNK])
            elif row.plan_json:
                entries = _loads_list(row.plan_json)
                if entries is not None:
                    await self._notify_update(sid, {"sessionUpdate": U_PLAN, "entries": entries})
            await self._mark_active(session, adapter_sid,
                                    agent.alias if agent.alias != row.agent_alias else None)
        finally:
            if claimed:
                rt.registry.restoring.discard(sid)
            rt.registry.unreserve()
        return {}

    async def _history(self, sid: str) -> list[session_pb2.HistoryItem]:
        """The stored items of ``sid``, oldest first, from the paged StreamHistory."""
        stream = self.runtime.session_stub.StreamHistory(
            session_pb2.StreamHistoryRequest(session_id=sid))
        return [item async for page in stream for item in page.items]

    async def _notify_update(self, sid: str, update: dict[str, Any]) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self.send(notification_line(M_SESSION_UPDATE, {"sessionId": sid,
                                                                 "update": update}))

    async def session_list(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §8: every session this connection's principal may see, in ACP shape."""
        cwd = _first_str(params, "cwd") or ""
        if cwd:  # workspaces are stored as real paths; match a symlinked or relative filter too
            try:
                cwd = await asyncio.to_thread(os.path.realpath, cwd)
            except ValueError:  # e.g. an embedded NUL: no stored workspace can match
                return {"sessions": []}
        cursor = _first_str(params, "cursor") or ""
        try:
            resp = await self.runtime.session_stub.ListSessions(session_pb2.ListSessionsRequest(
                requester_session_key=self.principal, cwd=cwd, cursor=cursor,
                visibility=PRINCIPAL_VISIBILITY if self.principal else ""))
        except grpc.aio.AioRpcError as exc:
            raise _grpc_error(exc) from None
        sessions = []
        for row in resp.sessions:
            info: dict[str, Any] = {"sessionId": row.session_id, "cwd": row.workspace_dir}
            if row.title:
                info["title"] = row.title
            info["updatedAt"] = _iso(row.last_activity or row.created_at)
            sessions.append(info)
        out: dict[str, Any] = {"sessions": sessions}
        if resp.next_cursor:
            out["nextCursor"] = resp.next_cursor
        return out

    async def session_event(self, params: dict[str, Any]) -> dict[str, Any]:
        """SPEC §8: inbound session/update or session/event touches the session."""
        sid = _session_id(params)
        event_type = params.get("type")
        if not isinstance(event_type, str):
            update = params.get("update")
            event_type = update.get("sessionUpdate") if isinstance(update, dict) else None
            if not isinstance(event_type, str):
                event_type = "unknown"
        session = self.sessions.get(sid)
        if session is not None:
            session.touch()
        elif self.principal:
            await self._visible_row(sid)  # another client's session is "not found" here
        try:
            await self.runtime.session_stub.TouchSession(
                session_pb2.TouchSessionRequest(session_id=sid))
        except grpc.aio.AioRpcError as exc:
            if session is None:  # _grpc_error maps NOT_FOUND/FAILED_PRECONDITION to -32000
                raise _grpc_error(exc, sid) from None
        return {"sessionId": sid, "type": event_type, "status": "processed"}


def _cause(exc: BaseException) -> str:
    if isinstance(exc, JsonRpcError):
        return exc.message
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.details() or exc.code().name
    text = str(exc)
    return text if text else type(exc).__name__


def _start_failed(alias: str, exc: BaseException) -> JsonRpcError:
    """The -32603 of a session whose agent could not be started or set up."""
    return JsonRpcError(INTERNAL_ERROR, f"Failed to start agent `{alias}`: {_cause(exc)}")


def _mcp_servers(params: dict[str, Any]) -> list[Any]:
    """The client's ``mcpServers`` list, passed on to the adapter as given ([] if malformed)."""
    servers = params.get("mcpServers")
    return servers if isinstance(servers, list) else []


def _loads_list(text: str) -> list[Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, list) else None
