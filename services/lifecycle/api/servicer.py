"""The gRPC face of the lifecycle service: every RPC of ``acpgate.lifecycle.v1``.

Error mapping (see the proto): INVALID_ARGUMENT malformed request, NOT_FOUND
unknown lease, FAILED_PRECONDITION a second attacher or a lease that is not
open (or not served by this run), UNAVAILABLE spawn failure, PERMISSION_DENIED
a launch spec the session service did not seal (:mod:`services.lifecycle.adapters.sealed`).

A warm lease (KeepWarm) is not attachable: FAILED_PRECONDITION until a
session takes it through EnsureSession.

Attach: the first response is ``attached`` (the lease); then ``stdout``
batches, each holding every line that was ready; last an ``exit``. A client
that goes away frees the slot, and buffered output waits for the next attacher.
A caller on this host may take the pipes instead (``AttachOpen.fd_pass``,
:mod:`services.lifecycle.api.attach_stream`): the stream then carries only the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from acpgate_contracts.launch.v1 import launch_pb2
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.common.grpc_server import abort
from services.common.logs import get_logger
from services.lifecycle.adapters.pool_spec import PoolSpec
from services.lifecycle.adapters.sealed import LaunchRefused, OpenedLaunch, open_launch
from services.lifecycle.adapters.session_logs import forget_session_log, link_session_log
from services.lifecycle.api.attach_stream import Opened, prepend, relay_exit, resume, settle
from services.lifecycle.api.convert import (
    PB_TO_STATE,
    ensured_to_pb,
    exit_to_pb,
    lease_to_pb,
    reap_result_to_pb,
    stdout_response,
    verification_to_pb,
)
from services.lifecycle.api.keep_on_loss import keep_later
from services.lifecycle.attach.channel import MAX_LINE_BYTES, AttachBusy
from services.lifecycle.attach.fd_grants import FdGrant, FdGrants
from services.lifecycle.controller import (
    Ensured,
    EnsureRequest,
    InvalidRequest,
    LeaseNotFound,
    LifecycleController,
    NoWarmAdapter,
    Unavailable,
)
from services.lifecycle.leases.store import LeaseState
from services.lifecycle.processes.usage import add_usage

__all__ = ["LifecycleServicer"]

log = get_logger("lifecycle.servicer")

Ctx = grpc.aio.ServicerContext[Any, Any]

class LifecycleServicer(lifecycle_pb2_grpc.LifecycleServiceServicer):
    """Translates the lifecycle RPCs to :class:`LifecycleController` calls."""

    def __init__(self, controller: LifecycleController, *, seal_key: bytes,
                 fd_grants: FdGrants | None = None) -> None:
        """``fd_grants``: the grants of this service's fd socket (None: it has none, and
        every stream relays)."""
        self.controller = controller
        #: Opens the launch specs the session service sealed; nothing else is run.
        self._seal_key = seal_key
        self._fds = fd_grants
        #: Leases kept for a new attacher after theirs was lost (services.lifecycle.api.keep_on_loss).
        self._kept: set[asyncio.Task[None]] = set()
        #: Session log links being written (off the ensure's path: a warm take is on
        #: session/new's critical path).
        self._log_links: set[asyncio.Future[Any]] = set()

    def _in_logs(self, job: Any, lease_id: str, session_key: str) -> None:
        """Run a :mod:`~services.lifecycle.adapters.session_logs` ``job`` in the background (a failure
        costs only the link, and is logged)."""
        task = asyncio.ensure_future(asyncio.to_thread(
            job, self.controller.state_dir, lease_id, session_key))
        self._log_links.add(task)

        def done(finished: asyncio.Future[Any]) -> None:
            self._log_links.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                log.warning("session_log_link_failed", lease_id=lease_id,
                            why=str(finished.exception()))
        task.add_done_callback(done)

    async def _opened(self, sealed: launch_pb2.SealedLaunch, context: Ctx) -> OpenedLaunch:
        """The launch spec ``sealed`` carries; PERMISSION_DENIED unless the session service
        sealed it (a caller never names a command of its own)."""
        try:
            return open_launch(sealed, self._seal_key)
        except LaunchRefused as exc:
            log.warning("launch_refused", why=str(exc))
            await abort(context, grpc.StatusCode.PERMISSION_DENIED, str(exc))

    async def GetInstance(self, request: pb.GetInstanceRequest, context: Ctx) -> pb.Instance:
        """This service's gateway instance id (its slot's) and where its state lives."""
        info = self.controller.instance()
        return pb.Instance(
            gateway_instance_id=info.gateway_instance_id,
            state_dir=info.state_dir,
            wrapper_root=info.wrapper_root,
            started_at=info.started_at,
            slot=info.slot,
            install_id=info.install_id,
        )

    async def EnsureSession(
        self, request: pb.EnsureSessionRequest, context: Ctx
    ) -> pb.EnsureSessionResponse:
        """Spawn or return the live lease of a session key."""
        return ensured_to_pb(await self._ensure(request, context))

    async def _ensure(self, request: pb.EnsureSessionRequest, context: Ctx, *,
                      hold: bool = False) -> Ensured:
        """The controller's ensure for ``request`` (INVALID_ARGUMENT / UNAVAILABLE /
        FAILED_PRECONDITION when refused). It runs to its end even when the caller goes
        away meanwhile (a spawn stopped half-way would leave a lease nobody finishes);
        what it spawned or took for a caller that went away is let go (:meth:`_left`).
        ``hold``: an Attach stream's ensure, whose lease is held until :meth:`_left`."""
        launch = await self._opened(request.launch, context)
        req = EnsureRequest(
            session_key=request.session_key,
            command=launch.command,
            args=launch.args,
            env=launch.env,
            pass_env=launch.pass_env,
            cwd=request.cwd,
            warm_pool=request.warm_pool,
            warm_only=request.warm_only,
        )
        task = asyncio.ensure_future(self.controller.ensure_session(req, hold=hold))
        try:
            ensured = await asyncio.shield(task)
        except InvalidRequest as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Unavailable as exc:
            await abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except NoWarmAdapter as exc:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except asyncio.CancelledError:
            task.add_done_callback(lambda done: self._left_before(done, req.warm_pool))
            raise
        if ensured.spawned:  # a lease that starts to serve this session: its log by name
            self._in_logs(link_session_log, ensured.lease.lease_id, req.session_key)
        return ensured

    def _left_before(self, task: asyncio.Future[Ensured], pool: str) -> None:
        """An ensure whose caller went away before it ended: give up what it made."""
        if not task.cancelled() and task.exception() is None:
            self._left(task.result(), pool, touched=False)

    def _left(self, ensured: Ensured, pool: str, *, touched: bool, keep: bool = False) -> None:
        """The caller that ensured a lease is gone (its Attach stream ended, or it went
        away before the ensure did): what it spawned or took goes with it — a warm adapter
        nobody touched back to ``pool`` (or closed when the pool does not take it back),
        any other closed. A lease it found live already stays. Another ensure of the key
        gets the lease only once this let-go is over (``services.lifecycle.leases.holds``)."""
        if not ensured.spawned:
            return
        lease_id = ensured.lease.lease_id
        if ensured.warm and not touched:
            log.info("attacher_gone", lease_id=lease_id, outcome="give-back")
            self._in_logs(forget_session_log, lease_id, ensured.lease.session_key)
            letting_go = self.controller.give_back_later(lease_id, pool)
        elif keep and (channel := self.controller.channel(lease_id)) is not None:
            letting_go = keep_later(self.controller, channel, self._kept)
        else:
            log.info("attacher_gone", lease_id=lease_id, outcome="close")
            letting_go = self.controller.close_later(lease_id, "detached")
        holds = self.controller.holds
        letting_go.add_done_callback(lambda _: holds.release(lease_id))

    async def KeepWarm(self, request: pb.KeepWarmRequest, context: Ctx) -> pb.KeepWarmResponse:
        """Create, resize or replace a warm pool; it fills in the background."""
        launch = await self._opened(request.launch, context)
        spec = PoolSpec(
            name=request.pool,
            command=launch.command,
            args=launch.args,
            env=launch.env,
            pass_env=launch.pass_env,
            cwd=request.cwd,
            watch_paths=tuple(request.watch_paths),
            count=request.count,
        )
        try:
            ready = await self.controller.pools.keep(spec)
        except InvalidRequest as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.KeepWarmResponse(ready=ready)

    async def Attach(
        self, request_iterator: AsyncIterator[pb.AttachRequest], context: Ctx
    ) -> AsyncIterator[pb.AttachResponse]:
        """Bidirectional adapter stdio for one attacher at a time."""
        iterator = request_iterator.__aiter__()
        opened = await self._open_attach(iterator, context)
        grant: FdGrant | None = None
        try:
            with opened.channel.attach():
                grant = self._offer_pipes(opened)
                yield opened.first
                if opened.resume_pipes:  # the caller reads and writes them: only the exit
                    async for response in resume(opened.channel, iterator):
                        yield response
                    return
                first: pb.AttachRequest | None = None
                if grant is not None:
                    taken, choice = await settle(grant, iterator)
                    if not taken and self._fds is not None:
                        self._fds.revoke(grant)  # the stream it is: the pipes stay here
                    if taken:
                        opened.touched = True
                        assert isinstance(choice, asyncio.Future)
                        async for response in relay_exit(opened.channel, iterator, choice):
                            yield response
                        return
                    if choice is None:
                        return  # the caller's requests ended before it chose
                    assert isinstance(choice, pb.AttachRequest)
                    first = choice
                opened.channel.stdout.read_here()  # after a caller that held the pipes
                stdin_task = asyncio.create_task(self._pump_stdin(iterator, opened, first))
                try:
                    # The relay path: batches go out from here, no generator in between.
                    while True:
                        batch = await opened.channel.next_batch()
                        if batch is None:
                            break
                        opened.touched = True
                        if batch:
                            yield stdout_response(batch)
                        dropped = opened.channel.take_too_long()
                        if dropped:
                            yield pb.AttachResponse(too_long=pb.LinesTooLong(
                                count=dropped, limit=MAX_LINE_BYTES))
                    yield pb.AttachResponse(exit=exit_to_pb(opened.channel.exit_info))
                finally:
                    stdin_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await stdin_task
        except AttachBusy:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"lease {opened.lease.lease_id} already has an attacher",
            )
        finally:
            if grant is not None and self._fds is not None:
                self._fds.revoke(grant)
            lost = opened.keep_on_loss
            if opened.ensured is not None:
                self._left(opened.ensured, opened.pool, touched=opened.touched, keep=lost)
            elif lost:  # a lease attached again after a lost attacher
                keep_later(self.controller, opened.channel, self._kept)

    def _offer_pipes(self, opened: Opened) -> FdGrant | None:
        """A grant for the pipes in the first response, when the caller can take them and
        this service offers them while the adapter runs (else None: the stream relays)."""
        channel = opened.channel
        if (self._fds is None or not opened.fd_pass or not channel.running
                or channel.stdout.done.is_set()):
            return None
        grant = self._fds.issue(channel)
        opened.first.fd_grant.CopyFrom(pb.FdGrant(grant_id=grant.grant_id,
                                                  generation=grant.generation))
        return grant

    async def _open_attach(
        self, iterator: AsyncIterator[pb.AttachRequest], context: Ctx
    ) -> Opened:
        """The stream the first request opens: ``open{lease_id}``, or ``open{ensure}``
        (the lease ensured first).

        Aborts INVALID_ARGUMENT without a proper open, NOT_FOUND for an unknown
        lease, FAILED_PRECONDITION for a lease not open or not served by this run,
        and as EnsureSession for a refused ensure.
        """
        try:
            first = await iterator.__anext__()
        except StopAsyncIteration:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, "Attach needs an open request")
        request = first.open
        if first.WhichOneof("msg") != "open" or not (request.lease_id or request.HasField("ensure")):
            await abort(
                context, grpc.StatusCode.INVALID_ARGUMENT,
                "the first Attach request must be open{lease_id} or open{ensure}"
            )
        ensured: Ensured | None = None
        if request.lease_id:
            try:
                lease = await self.controller.get_lease(request.lease_id)
            except LeaseNotFound as exc:
                await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
            response = pb.AttachResponse(attached=lease_to_pb(lease))
        else:
            ensured = await self._ensure(request.ensure, context, hold=True)
            lease = ensured.lease
            response = pb.AttachResponse(ensured=ensured_to_pb(ensured))
        lease_id = lease.lease_id
        channel = self.controller.channel(lease_id)
        if ensured is not None and (lease.state != LeaseState.OPEN or channel is None):
            self._left(ensured, request.ensure.warm_pool, touched=False)  # refused below
        if lease.state == LeaseState.WARM:
            await abort(context, grpc.StatusCode.FAILED_PRECONDITION,
                        f"lease {lease_id} is warm: a session takes it through EnsureSession")
        if lease.state != LeaseState.OPEN or channel is None:
            await abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"lease {lease_id} is {lease.state.value} and not served by this lifecycle service",
            )
        return Opened(response, lease, channel, ensured, request.ensure.warm_pool,
                       fd_pass=request.fd_pass and not request.resume_pipes,
                       resume_pipes=request.resume_pipes, keep_on_loss=request.keep_on_loss)

    async def _pump_stdin(
        self, iterator: AsyncIterator[pb.AttachRequest], opened: Opened,
        first: pb.AttachRequest | None = None,
    ) -> None:
        """Feed stdin lines (and close_stdin) from the client to the adapter, ``first``
        (a request read already) first."""
        channel = opened.channel
        async for req in prepend(first, iterator):
            kind = req.WhichOneof("msg")
            if kind == "stdin":
                opened.touched = True
                lines: Sequence[str] = req.stdin.lines
                if not await channel.write_lines(list(lines)):
                    log.info("stdin_dropped", lease_id=channel.lease_id, lines=len(lines))
            elif kind == "close_stdin" and req.close_stdin:
                opened.touched = True
                await channel.close_stdin()
            # A repeated open, or use_stream, is ignored: the stream is already attached.

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: Ctx
    ) -> pb.CloseSessionResponse:
        """Verify and reap one lease's tree."""
        try:
            result = await self.controller.close_session(
                lease_id=request.lease_id,
                session_key=request.session_key,
                reason=request.reason or "close",
            )
        except InvalidRequest as exc:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except LeaseNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        resp = pb.CloseSessionResponse(
            terminated_pids=list(result.terminated_pids),
            surviving_pids=list(result.surviving_pids),
            unverified_reason=result.unverified_reason,
        )
        if result.lease is not None:
            resp.lease.CopyFrom(lease_to_pb(result.lease))
        return resp

    async def ReapOrphans(
        self, request: pb.ReapOrphansRequest, context: Ctx
    ) -> pb.ReapOrphansResponse:
        """Reap this gateway's open/closing leases not served by this run."""
        results = await self.controller.reap_orphans()
        return pb.ReapOrphansResponse(results=[reap_result_to_pb(r) for r in results])

    async def ListLeases(self, request: pb.ListLeasesRequest, context: Ctx) -> pb.ListLeasesResponse:
        """Leases filtered by state and session key."""
        if request.state != pb.LEASE_STATE_UNSPECIFIED and request.state not in PB_TO_STATE:
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"unknown state {request.state}")
        state = PB_TO_STATE.get(request.state)
        leases = await self.controller.list_leases(state, request.session_key)
        return pb.ListLeasesResponse(leases=[lease_to_pb(x) for x in leases])

    async def VerifyOwnedTree(
        self, request: pb.VerifyOwnedTreeRequest, context: Ctx
    ) -> pb.VerifyOwnedTreeResponse:
        """Read-only verification of one lease."""
        try:
            verification = await self.controller.verify(request.lease_id)
        except LeaseNotFound as exc:
            await abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        response = verification_to_pb(verification)
        if request.with_usage and verification.verified:
            await asyncio.to_thread(add_usage, response)
        return response

