"""The edge's client of the session service: one method per call the edge makes.

:class:`SessionBackend` wraps the service's stub on a channel that already carries the
service credential. Each method takes domain arguments, returns domain values
(:mod:`.session_types`), and raises :class:`~.errors.ServiceError` for every failed call;
stream calls are async generators (close one, e.g. with :func:`contextlib.aclosing`, to
end its call at once). ``deadline_secs`` is the gRPC deadline the call carries
(None: none). The caller owns the channel and closes it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence

import grpc

from acpgate_contracts.session.v1 import session_pb2 as pb
from acpgate_contracts.session.v1 import session_pb2_grpc
from services.common.policy import SecurityPolicy
from services.edge.backends.errors import from_rpc
from services.edge.backends.session_types import (
    AgentList,
    AgentSummary,
    EventBatch,
    EventPage,
    Forked,
    HistoryItem,
    LiveSession,
    NewSession,
    OperationVerdict,
    Reader,
    ResolvedAgent,
    RowUpdate,
    SentTo,
    SessionActivity,
    SessionPage,
    SessionRow,
    SessionStatus,
    SlotGrant,
    Spawned,
    StoreStatus,
    TurnUsage,
    WorkerCounters,
    Workspace,
)

__all__ = ["SessionBackend"]


def _workspace(w: pb.ResolvedWorkspace) -> Workspace:
    return Workspace(w.workspace_dir, w.is_agent_workspace, tuple(w.additional_directories))


def _reader(reader: Reader) -> dict[str, object]:
    if reader.operator:
        return {"operator": True}
    return {"requester_session_key": reader.requester_session_key,
            "see_all_principals": reader.see_all_principals}


class SessionBackend:
    """The session service, in the edge's terms (module doc)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        #: The generated stub: for tests and tools that speak the contract itself.
        self.stub = session_pb2_grpc.SessionServiceStub(channel)

    @classmethod
    def of_stub(cls, stub: session_pb2_grpc.SessionServiceAsyncStub) -> SessionBackend:
        """The backend over a stub made elsewhere (a test's, on its own channel)."""
        backend = cls.__new__(cls)
        backend.stub = stub
        return backend

    # ------------------------------------------------------------------ store and agents

    async def store_status(self, *, deadline_secs: float | None = None) -> StoreStatus:
        try:
            s = await self.stub.GetStoreStatus(pb.GetStoreStatusRequest(), timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return StoreStatus(s.persistent, s.fallback_reason, s.claim_ttl_ms)

    async def resolve_agent(self, explicit_alias: str = "", connection_default: str = ""
                            ) -> ResolvedAgent:
        try:
            agent = await self.stub.ResolveAgent(pb.ResolveAgentRequest(
                explicit_alias=explicit_alias, connection_default=connection_default))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return ResolvedAgent.of(agent)

    async def resolve_restore_agent(self, session_id: str) -> ResolvedAgent:
        try:
            agent = await self.stub.ResolveRestoreAgent(
                pb.ResolveRestoreAgentRequest(session_id=session_id))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return ResolvedAgent.of(agent)

    async def resolve_workspace(self, alias: str, cwd: str, *, base_dir: str = "",
                                additional_directories: Sequence[str] = (),
                                local_user: bool = False) -> Workspace:
        try:
            w = await self.stub.ResolveWorkspace(pb.ResolveWorkspaceRequest(
                alias=alias, cwd=cwd, base_dir=base_dir,
                additional_directories=list(additional_directories), local_user=local_user))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return _workspace(w)

    async def get_policy(self, alias: str, workspace_dir: str,
                         additional_directories: Sequence[str], session_id: str, *,
                         local_user: bool) -> SecurityPolicy:
        try:
            p = await self.stub.GetPolicy(pb.GetPolicyRequest(
                alias=alias, workspace_dir=workspace_dir,
                additional_directories=list(additional_directories), session_id=session_id,
                local_user=local_user))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SecurityPolicy.from_proto(p)

    async def check_operation(self, session_id: str, operation: int, path: str
                              ) -> OperationVerdict:
        try:
            a = await self.stub.CheckOperation(pb.CheckOperationRequest(
                session_id=session_id, operation=operation,  # type: ignore[arg-type]
                path=path))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return OperationVerdict(a.allowed, a.reason, a.resolved_path)

    async def record_agent_capabilities(self, alias: str, capabilities_json: str) -> None:
        try:
            await self.stub.RecordAgentCapabilities(pb.RecordAgentCapabilitiesRequest(
                alias=alias, capabilities_json=capabilities_json))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def list_warm_agents(self) -> list[ResolvedAgent]:
        try:
            resp = await self.stub.ListWarmAgents(pb.ListWarmAgentsRequest())
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return [ResolvedAgent.of(a) for a in resp.agents]

    async def list_agents(self, connection_default: str) -> AgentList:
        try:
            resp = await self.stub.ListAgents(
                pb.ListAgentsRequest(connection_default=connection_default))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return AgentList(tuple(AgentSummary(a.alias, a.kind, a.description, a.default_model)
                               for a in resp.agents), resp.default_alias)

    # ------------------------------------------------------------------ rows

    async def resolve_new_session(
            self, session_id: str, *, explicit_alias: str, connection_default: str, cwd: str,
            base_dir: str, additional_directories: Sequence[str], local_user: bool,
            gateway_instance_id: str, host: str, public_url: str, owner_session_key: str,
            mcp_servers_json: str) -> NewSession:
        """The agent, workspace and policy of a new session, and its row created claimed
        by ``gateway_instance_id``, in one call."""
        try:
            got = await self.stub.ResolveNewSession(pb.ResolveNewSessionRequest(
                agent=pb.ResolveAgentRequest(explicit_alias=explicit_alias,
                                             connection_default=connection_default),
                cwd=cwd, base_dir=base_dir,
                additional_directories=list(additional_directories), local_user=local_user,
                create=pb.CreateSessionRequest(
                    session_id=session_id, gateway_instance_id=gateway_instance_id,
                    host=host, public_url=public_url, owner_session_key=owner_session_key,
                    mcp_servers_json=mcp_servers_json)))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return NewSession(ResolvedAgent.of(got.agent), _workspace(got.workspace),
                          SecurityPolicy.from_proto(got.policy), SessionRow.of(got.row))

    async def get_session(self, session_id: str, *, deadline_secs: float | None = None
                          ) -> SessionRow:
        try:
            row = await self.stub.GetSession(pb.GetSessionRequest(session_id=session_id),
                                             timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SessionRow.of(row)

    async def create_child_session(self, session_id: str, *, agent_alias: str,
                                   workspace_dir: str, parent_session_key: str,
                                   owner_session_key: str,
                                   additional_directories: Sequence[str] = ()) -> None:
        """Store a row for a child session an agent started under ``parent_session_key``
        (spawned by it, owned by ``owner_session_key``), marked as one (never restored
        itself: its parent is). A row of that id already stored:
        :class:`ServiceError` ``CONFLICT``."""
        try:
            await self.stub.CreateSession(pb.CreateSessionRequest(
                session_id=session_id, agent_alias=agent_alias, workspace_dir=workspace_dir,
                spawned_by=parent_session_key, parent_session_key=parent_session_key,
                owner_session_key=owner_session_key,
                additional_directories=list(additional_directories), subagent=True))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def update_session(self, update: RowUpdate) -> None:
        request = pb.UpdateSessionRequest(
            session_id=update.session_id, holder_instance_id=update.holder_instance_id,
            claim_generation=update.claim_generation)
        if update.state is not None:
            request.state = update.state  # type: ignore[assignment]
        for name in ("lease_id", "adapter_session_id", "agent_alias", "title",
                     "mcp_servers_json", "mode_id", "config_json", "protocol_version"):
            value = getattr(update, name)
            if value is not None:
                setattr(request, name, value)
        if update.additional_directories is not None:
            request.additional_directories.SetInParent()  # an empty list is a change too
            request.additional_directories.values.extend(update.additional_directories)
        try:
            await self.stub.UpdateSession(request)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def touch_session(self, session_id: str) -> None:
        try:
            await self.stub.TouchSession(pb.TouchSessionRequest(session_id=session_id))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def delete_session(self, session_id: str, holder_instance_id: str) -> bool:
        """Whether a row was deleted."""
        try:
            resp = await self.stub.DeleteSession(pb.DeleteSessionRequest(
                session_id=session_id, holder_instance_id=holder_instance_id))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return resp.deleted

    async def fork_session(
            self, parent_session_id: str, session_id: str, *, reader: Reader,
            gateway_instance_id: str, host: str, public_url: str, cwd: str, base_dir: str,
            local_user: bool, additional_directories: Sequence[str] | None = None,
            mcp_servers_json: str | None = None) -> Forked:
        """A copy of the parent's row and history as ``session_id``, claimed by
        ``gateway_instance_id`` (None: the parent's extra roots and MCP servers)."""
        request = pb.ForkSessionRequest(
            parent_session_id=parent_session_id, session_id=session_id,
            gateway_instance_id=gateway_instance_id, host=host, public_url=public_url,
            cwd=cwd, base_dir=base_dir, local_user=local_user,
            operator=reader.operator, requester_session_key=reader.requester_session_key)
        if additional_directories is not None:
            request.additional_directories.values.extend(additional_directories)
        if mcp_servers_json is not None:
            request.mcp_servers_json = mcp_servers_json
        try:
            got = await self.stub.ForkSession(request)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return Forked(SessionRow.of(got.session), ResolvedAgent.of(got.agent),
                      SecurityPolicy.from_proto(got.policy), SessionRow.of(got.parent))

    # ------------------------------------------------------------------ claims and activity

    async def claim_session(self, session_id: str, gateway_instance_id: str, host: str,
                            public_url: str) -> SessionRow:
        try:
            row = await self.stub.ClaimSession(pb.ClaimSessionRequest(
                session_id=session_id, gateway_instance_id=gateway_instance_id, host=host,
                public_url=public_url))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SessionRow.of(row)

    async def renew_claims(self, gateway_instance_id: str, session_ids: Sequence[str]
                           ) -> list[str]:
        """The ids among ``session_ids`` whose claims are lost."""
        try:
            resp = await self.stub.RenewClaims(pb.RenewClaimsRequest(
                gateway_instance_id=gateway_instance_id, session_ids=list(session_ids)))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return list(resp.lost)

    async def release_session(self, session_id: str, gateway_instance_id: str,
                              claim_generation: int) -> None:
        try:
            await self.stub.ReleaseSession(pb.ReleaseSessionRequest(
                session_id=session_id, gateway_instance_id=gateway_instance_id,
                claim_generation=claim_generation))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def report_activity(self, gateway_instance_id: str, host: str,
                              sessions: Iterable[SessionActivity]) -> None:
        try:
            await self.stub.ReportActivity(pb.ReportActivityRequest(
                gateway_instance_id=gateway_instance_id, host=host,
                sessions=[pb.SessionActivity(
                    session_id=a.session_id, state=a.state,  # type: ignore[arg-type]
                    waiting_requests=a.waiting_requests, last_activity=a.last_activity,
                    lease_id=a.lease_id, attached_clients=a.attached_clients,
                    detached=a.detached) for a in sessions]))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def list_live_sessions(self, *, deadline_secs: float | None = None) -> list[LiveSession]:
        try:
            resp = await self.stub.ListLiveSessions(pb.ListLiveSessionsRequest(),
                                                    timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return [LiveSession(SessionRow.of(s.session), SessionActivity.of(s.activity),
                            s.reported_at)
                for s in resp.sessions]

    # ------------------------------------------------------------------ history and log

    async def append_turn(self, session_id: str, items: Sequence[HistoryItem], *,
                          token_delta: int, holder_instance_id: str, claim_generation: int,
                          usage: TurnUsage | None = None, plan_json: str | None = None,
                          log_turn_id: int = 0) -> None:
        request = pb.AppendTurnRequest(
            session_id=session_id, items=items, token_delta=token_delta,
            holder_instance_id=holder_instance_id, claim_generation=claim_generation,
            log_turn_id=log_turn_id)
        if usage is not None:
            request.usage.CopyFrom(pb.TurnUsage(
                input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                thought_tokens=usage.thought_tokens,
                cached_read_tokens=usage.cached_read_tokens,
                cached_write_tokens=usage.cached_write_tokens))
        if plan_json is not None:
            request.plan_json = plan_json
        try:
            await self.stub.AppendTurn(request)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    async def stream_history(self, session_id: str) -> AsyncGenerator[Sequence[HistoryItem]]:
        """The stored history of ``session_id``, a page at a time."""
        stream = self.stub.StreamHistory(pb.StreamHistoryRequest(session_id=session_id))
        try:
            async for page in stream:
                yield page.items
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        finally:
            stream.cancel()  # a reader that stops early ends the call at once

    async def get_history(self, session_id: str, reader: Reader, limit: int
                          ) -> AsyncGenerator[Sequence[HistoryItem]]:
        """At most ``limit`` of the last history items of a session ``reader`` may read."""
        stream = self.stub.GetHistory(pb.GetHistoryRequest(
            session_id=session_id, limit=limit, **_reader(reader)))  # type: ignore[arg-type]
        try:
            async for page in stream:
                yield page.items
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        finally:
            stream.cancel()  # a reader that stops early ends the call at once

    async def read_events(self, session_id: str, *, after_event_id: int = 0,
                          before_event_id: int = 0, with_history: bool = False,
                          running_turn_only: bool = False) -> AsyncGenerator[EventPage]:
        """The session's event log between the two ids (0: open), a page at a time;
        ``running_turn_only``: from the running turn's first event on (none: nothing)."""
        stream = self.stub.ReadEvents(pb.ReadEventsRequest(
            session_id=session_id, after_event_id=after_event_id,
            before_event_id=before_event_id, with_history=with_history,
            running_turn_only=running_turn_only))
        try:
            async for page in stream:
                yield EventPage(page.items, page.events)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        finally:
            stream.cancel()  # a reader that stops early ends the call at once

    async def append_events(self, batches: Iterable[EventBatch], *,
                            deadline_secs: float | None = None) -> list[str]:
        """Store every batch; per batch, in order, why it was refused ("" stored)."""
        request = pb.AppendEventsRequest()
        add_session = request.sessions.add
        for batch in batches:
            out = add_session(session_id=batch.session_id,
                              holder_instance_id=batch.holder_instance_id,
                              claim_generation=batch.claim_generation)
            add_chunk = out.chunks.add
            for first, last, turn_id, kind, prefix, payload, at, form in batch.chunks:
                add_chunk(first_event_id=first, last_event_id=last, turn_id=turn_id,
                          kind=kind, prefix=prefix, payload=payload, at_ms=at, form=form)
            add_turn = out.turns.add
            for turn_id, state, at in batch.turns:
                add_turn(turn_id=turn_id, state=state, at_ms=at)
        try:
            resp = await self.stub.AppendEvents(request, timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return list(resp.refused)

    async def interrupt_turns(self, *, instance_id: str = "", session_id: str = "",
                              deadline_secs: float | None = None) -> int:
        """Mark the running turns of a dead instance, or of one session, interrupted."""
        try:
            resp = await self.stub.InterruptTurns(pb.InterruptTurnsRequest(
                instance_id=instance_id, session_id=session_id), timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return resp.interrupted

    # ------------------------------------------------------------------ visibility

    async def list_sessions(self, reader: Reader, *, cwd: str = "", cursor: str = "",
                            limit: int = 0, query: str = "") -> SessionPage:
        try:
            resp = await self.stub.ListSessions(pb.ListSessionsRequest(
                cwd=cwd, cursor=cursor, limit=limit, query=query,
                **_reader(reader)))  # type: ignore[arg-type]
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SessionPage(tuple(SessionRow.of(r) for r in resp.sessions), resp.next_cursor)

    async def session_status(self, session_id: str, reader: Reader) -> SessionStatus:
        """The row of a session ``reader`` may see (NOT_FOUND: none it may see)."""
        try:
            got = await self.stub.SessionStatus(pb.SessionStatusRequest(
                session_id=session_id, **_reader(reader)))  # type: ignore[arg-type]
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SessionStatus(SessionRow.of(got.session), got.message_count)

    async def spawn_session(
            self, requester_session_key: str, session_id: str, *, agent_alias: str,
            cwd: str, label: str, gateway_instance_id: str, host: str, public_url: str,
            requester_turn_cap: str, local_user: bool) -> Spawned:
        try:
            got = await self.stub.SpawnSession(pb.SpawnSessionRequest(
                requester_session_key=requester_session_key, session_id=session_id,
                agent_alias=agent_alias, cwd=cwd, label=label,
                gateway_instance_id=gateway_instance_id, host=host, public_url=public_url,
                requester_turn_cap=requester_turn_cap, local_user=local_user))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return Spawned(SessionRow.of(got.session), ResolvedAgent.of(got.agent),
                       SecurityPolicy.from_proto(got.policy))

    async def send_to_session(self, requester_session_key: str, session_id: str, *,
                              requester_turn_cap: str) -> SentTo:
        try:
            got = await self.stub.SendToSession(pb.SendToSessionRequest(
                requester_session_key=requester_session_key, session_id=session_id,
                requester_turn_cap=requester_turn_cap))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SentTo(SessionRow.of(got.session), got.autonomy_cap)

    # ------------------------------------------------------------------ edge workers

    async def take_slot(self, pool: str, worker: str, incarnation: str, *, kind: int,
                        principal: str, limit: int, share: int, seq: int,
                        deadline_secs: float | None = None) -> SlotGrant:
        try:
            resp = await self.stub.TakeSlot(pb.TakeSlotRequest(
                worker=pb.WorkerId(pool=pool, worker=worker, incarnation=incarnation),
                kind=kind, principal=principal, limit=limit,  # type: ignore[arg-type]
                share=share, seq=seq), timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return SlotGrant(resp.granted, resp.limit, resp.per_principal, resp.releasing)

    async def report_worker(self, pool: str, worker: str, incarnation: str, *, seq: int,
                            counters: Mapping[str, int],
                            held: Iterable[tuple[int, str, int]],
                            deadline_secs: float | None = None) -> list[tuple[str, int]]:
        """Report what the worker holds, as ``(slot kind, principal, count)``; the
        ``(principal, count)`` of idle sessions the service asks it to release."""
        try:
            resp = await self.stub.ReportWorker(pb.ReportWorkerRequest(
                worker=pb.WorkerId(pool=pool, worker=worker, incarnation=incarnation),
                seq=seq, counters=counters,
                held=[pb.HeldSlots(kind=kind, principal=principal,  # type: ignore[arg-type]
                                   count=n) for kind, principal, n in held]),
                timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return [(order.principal, order.count) for order in resp.release]

    async def list_workers(self, pool: str, *, deadline_secs: float | None = None
                           ) -> list[WorkerCounters]:
        try:
            resp = await self.stub.ListWorkers(pb.ListWorkersRequest(pool=pool),
                                               timeout=deadline_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return [WorkerCounters(w.worker, dict(w.counters)) for w in resp.workers]
