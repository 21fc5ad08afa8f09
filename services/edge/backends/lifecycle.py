"""The edge's client of the lifecycle service: leases, warm pools, the ``Attach`` stream.

:class:`LifecycleBackend` has one method per lifecycle RPC the edge makes. Arguments and
answers are the frozen records below, never protobuf; every gRPC failure is raised as
:class:`~services.edge.backends.errors.ServiceError`. The sealed launch spec the session
service resolved travels through as opaque ``bytes`` (a serialized ``SealedLaunch``): the
edge never reads or builds one.

``Attach`` is an :class:`AttachStream`: the caller hands :meth:`LifecycleBackend.attach`
what opens it (:class:`AttachSpec`) and an async iterator of what it sends afterwards
(stdin lines as a list, or a :class:`Control`), and reads :data:`AttachEvent` records
until ``None`` (the stream's end). Where this edge can take an adapter's pipes over the
service's fd socket (:attr:`LifecycleBackend.fds`, set by whoever composes the runtime),
:meth:`LifecycleBackend.take_pipes` redeems an attach's :class:`FdGrant`.

The channel carries the service credential (``open_service_channel``); the caller must
close it, not this client.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from acpgate_contracts.launch.v1 import launch_pb2
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.edge.backends.errors import Failure, ServiceError, from_rpc
from services.edge.backends.fds import FdDialer, FdGrant, TakenPipes

__all__ = [
    "AdapterExited", "AttachEvent", "AttachSpec", "AttachStream", "Attached", "Closed",
    "Control", "EnsureSpec", "Ensured", "FdGrant", "Instance", "Lease", "LeaseState",
    "LifecycleBackend", "LinesDropped", "OwnedProcess", "OwnedTree", "StdoutLines",
]


class LeaseState(enum.Enum):
    """A lease's state; the value is the lowercase name operators see."""

    UNSPECIFIED = "unspecified"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    LOST = "lost"
    #: Spawned ahead of any session by a warm pool; not attachable until taken.
    WARM = "warm"


_STATE_OF: dict[pb.LeaseState.ValueType, LeaseState] = {
    pb.LEASE_STATE_UNSPECIFIED: LeaseState.UNSPECIFIED, pb.LEASE_STATE_OPEN: LeaseState.OPEN,
    pb.LEASE_STATE_CLOSING: LeaseState.CLOSING, pb.LEASE_STATE_CLOSED: LeaseState.CLOSED,
    pb.LEASE_STATE_LOST: LeaseState.LOST, pb.LEASE_STATE_WARM: LeaseState.WARM,
}
_WIRE_STATE: dict[LeaseState, pb.LeaseState.ValueType] = {v: k for k, v in _STATE_OF.items()}


@dataclass(frozen=True, slots=True)
class Instance:
    """Who the lifecycle service is (``GetInstance``)."""

    gateway_instance_id: str
    state_dir: str
    wrapper_root: str
    started_at: int
    slot: int
    install_id: str


@dataclass(frozen=True, slots=True)
class Lease:
    """One wrapper spawn as the edge may know it (times in ms since the epoch)."""

    lease_id: str
    session_key: str
    state: LeaseState
    started_at: int = 0
    gateway_instance_id: str = ""
    #: The wrapper's PID (0 while pending) and the adapter's inside its group.
    root_pid: int = 0
    adapter_pid: int = 0
    ended_at: int = 0
    exit_code: int | None = None
    exit_signal: int | None = None


def _lease(m: pb.Lease) -> Lease:
    return Lease(
        lease_id=m.lease_id, session_key=m.session_key,
        state=_STATE_OF.get(m.state, LeaseState.UNSPECIFIED), started_at=m.started_at,
        gateway_instance_id=m.gateway_instance_id, root_pid=m.root_pid,
        adapter_pid=m.adapter_pid, ended_at=m.ended_at,
        exit_code=m.exit_code if m.HasField("exit_code") else None,
        exit_signal=m.exit_signal if m.HasField("exit_signal") else None)


@dataclass(frozen=True, slots=True)
class EnsureSpec:
    """What ``EnsureSession`` (or an attach that ensures) asks for."""

    #: ``agent:<alias>:acp:<sessionId>``.
    session_key: str
    #: The sealed launch spec, serialized, exactly as the session service resolved it.
    launch: bytes
    #: The adapter's working directory (a taken warm adapter runs in its pool's).
    cwd: str = ""
    #: Take a warm adapter of this pool when one is ready ("" = never).
    warm_pool: str = ""
    #: Never spawn: the key's live lease or a warm adapter, else PRECONDITION.
    warm_only: bool = False


@dataclass(frozen=True, slots=True)
class Ensured:
    """What the lifecycle service did for an ensure."""

    lease: Lease
    #: False when an existing live lease was returned.
    spawned: bool
    #: True when the lease is a warm adapter of the named pool, just taken.
    warm: bool


@dataclass(frozen=True, slots=True)
class AttachSpec:
    """What opens an ``Attach`` stream: a lease, or an ensure (exactly one of the two)."""

    lease_id: str = ""
    ensure: EnsureSpec | None = None
    #: Ask for the adapter's pipes (an :class:`FdGrant` with the first event).
    fd_pass: bool = False
    #: The caller holds the pipes already (a broken stream re-opened): only the exit comes.
    resume_pipes: bool = False
    #: The lease outlives this stream's loss for a while (a restarted edge re-adopts it).
    keep_on_loss: bool = False

    @property
    def label(self) -> str:
        """What names the stream in logs: its lease, or the key being ensured."""
        return self.lease_id or (self.ensure.session_key if self.ensure else "")


class Control(enum.Enum):
    """What an attacher sends besides stdin lines."""

    #: EOF on the adapter's stdin (the process is not signalled).
    CLOSE_STDIN = "close_stdin"
    #: The grant will not be redeemed: relay over the stream.
    USE_STREAM = "use_stream"


@dataclass(frozen=True, slots=True)
class Attached:
    """The stream's first event: attached to ``lease``; ``ensured`` when it was opened with
    an ensure; ``grant`` when the pipes are offered."""

    lease: Lease
    ensured: Ensured | None = None
    grant: FdGrant | None = None


@dataclass(frozen=True, slots=True)
class StdoutLines:
    """Lines the adapter wrote to stdout (newline-free, in order)."""

    lines: Sequence[str]


@dataclass(frozen=True, slots=True)
class AdapterExited:
    """The adapter exited (the stream ends after this)."""

    #: Exit code when it exited, or -1; the terminating signal, or 0.
    exit_code: int
    signal: int
    #: The last lines of its stderr (raw: may hold secrets).
    stderr_tail: str


@dataclass(frozen=True, slots=True)
class LinesDropped:
    """Adapter lines over the service's line limit were dropped (framing is broken)."""

    count: int
    #: The limit, in bytes.
    limit: int


#: What an :class:`AttachStream` reads.
AttachEvent = Attached | StdoutLines | AdapterExited | LinesDropped


@dataclass(frozen=True, slots=True)
class Closed:
    """What ``CloseSession`` did."""

    lease: Lease
    terminated_pids: tuple[int, ...]
    surviving_pids: tuple[int, ...]
    #: Why nothing was signalled when verification failed closed ("" on success).
    unverified_reason: str


@dataclass(frozen=True, slots=True)
class OwnedProcess:
    """One verified process of a lease's tree (depth 0 is the wrapper)."""

    pid: int
    ppid: int
    pgid: int
    depth: int
    cmdline: tuple[str, ...]
    #: With usage asked for: resident bytes and CPU seconds (0: not measured).
    rss_bytes: int = 0
    cpu_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class OwnedTree:
    """A lease's live tree (``VerifyOwnedTree``), or why it cannot be verified."""

    verified: bool
    reason: str
    root_gone: bool
    processes: tuple[OwnedProcess, ...]


def _sealed(launch: bytes) -> launch_pb2.SealedLaunch:
    """The sealed launch spec ``launch`` holds; INVALID when it is not one (it came from
    somewhere other than the session service)."""
    try:
        return launch_pb2.SealedLaunch.FromString(launch)
    except DecodeError:
        raise ServiceError(Failure.INVALID, "malformed sealed launch spec") from None


def _ensure_request(spec: EnsureSpec) -> pb.EnsureSessionRequest:
    return pb.EnsureSessionRequest(
        session_key=spec.session_key, launch=_sealed(spec.launch), cwd=spec.cwd,
        warm_pool=spec.warm_pool, warm_only=spec.warm_only)


def _opening(spec: AttachSpec) -> pb.AttachOpen:
    opening = pb.AttachOpen(lease_id=spec.lease_id, fd_pass=spec.fd_pass,
                            resume_pipes=spec.resume_pipes, keep_on_loss=spec.keep_on_loss)
    if spec.ensure is not None:
        opening.ensure.CopyFrom(_ensure_request(spec.ensure))
    return opening


def _ensured(m: pb.EnsureSessionResponse) -> Ensured:
    return Ensured(lease=_lease(m.lease), spawned=m.spawned, warm=m.warm)


def _event(resp: pb.AttachResponse) -> AttachEvent | None:
    """The record of one response (None: one this edge does not know, skipped)."""
    which = resp.WhichOneof("msg")
    if which == "stdout":
        return StdoutLines(resp.stdout.lines)
    grant = (FdGrant(resp.fd_grant.grant_id, resp.fd_grant.generation)
             if resp.HasField("fd_grant") else None)
    if which == "attached":
        return Attached(_lease(resp.attached), None, grant)
    if which == "ensured":
        ensured = _ensured(resp.ensured)
        return Attached(ensured.lease, ensured, grant)
    if which == "exit":
        return AdapterExited(resp.exit.exit_code, resp.exit.signal, resp.exit.stderr_tail)
    if which == "too_long":
        return LinesDropped(resp.too_long.count, resp.too_long.limit)
    return None


async def _requests(opening: pb.AttachOpen, outgoing: AsyncIterator[list[str] | Control],
                    ) -> AsyncIterator[pb.AttachRequest]:
    yield pb.AttachRequest(open=opening)
    async for item in outgoing:
        if item is Control.CLOSE_STDIN:
            yield pb.AttachRequest(close_stdin=True)
        elif item is Control.USE_STREAM:
            yield pb.AttachRequest(use_stream=True)
        else:
            yield pb.AttachRequest(stdin=pb.Lines(lines=item))


class AttachStream:
    """One ``Attach`` call: read its events, cancel it. A failure is a ServiceError; a
    read after :meth:`cancel` raises ``asyncio.CancelledError``."""

    def __init__(self, call: Any, failed: ServiceError | None = None) -> None:
        self._call = call
        #: Why the call was never made (its first read raises it).
        self._failed = failed

    async def read(self) -> AttachEvent | None:
        """The next event, or None at the stream's end."""
        if self._failed is not None:
            raise self._failed
        while True:
            try:
                resp = await self._call.read()
            except grpc.aio.AioRpcError as exc:
                raise from_rpc(exc) from None
            if resp is grpc.aio.EOF:  # type: ignore[attr-defined]
                return None
            event = _event(resp)
            if event is not None:
                return event

    def cancel(self) -> None:
        """End the call (the service sees the caller go)."""
        if self._call is not None:
            self._call.cancel()


if TYPE_CHECKING:  # what the generated stub is on an aio channel (its stub types only that)
    _Stub = lifecycle_pb2_grpc.LifecycleServiceAsyncStub


class LifecycleBackend:
    """The lifecycle service, for the edge (module docstring)."""

    def __init__(self, channel: grpc.aio.Channel, fds: FdDialer | None = None) -> None:
        self._stub: _Stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
        #: The service's fd socket when this edge can take adapters' pipes there (None:
        #: every attach relays over its stream).
        self.fds = fds

    async def get_instance(self) -> Instance:
        """``GetInstance``: the service's gateway instance id and where its state lives."""
        try:
            m = await self._stub.GetInstance(pb.GetInstanceRequest())
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return Instance(m.gateway_instance_id, m.state_dir, m.wrapper_root, m.started_at,
                        m.slot, m.install_id)

    async def ensure(self, spec: EnsureSpec) -> Ensured:
        """``EnsureSession``: the key's live lease, a warm adapter, or a spawn."""
        try:
            return _ensured(await self._stub.EnsureSession(_ensure_request(spec)))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None

    def attach(self, spec: AttachSpec,
               outgoing: AsyncIterator[list[str] | Control]) -> AttachStream:
        """Open ``Attach`` with ``spec``, then send what ``outgoing`` yields (module doc)."""
        try:
            opening = _opening(spec)
        except ServiceError as exc:
            return AttachStream(None, exc)
        return AttachStream(self._stub.Attach(_requests(opening, outgoing)))

    async def take_pipes(self, lease_id: str, grant: FdGrant) -> TakenPipes:
        """Redeem ``grant`` at the fd socket (only when :attr:`fds` is set): raises
        ``PipesNotTaken`` or ``PipesLost`` (:mod:`services.edge.backends.fds`)."""
        assert self.fds is not None, "no fd socket to take pipes at"
        return await self.fds.redeem(lease_id, grant)

    async def keep_warm(self, pool: str, launch: bytes, cwd: str, watch_paths: Sequence[str],
                        count: int) -> int:
        """``KeepWarm``: keep ``count`` adapters of ``launch`` ready in ``pool`` (0 empties
        it); how many are ready now."""
        try:
            resp = await self._stub.KeepWarm(pb.KeepWarmRequest(
                pool=pool, launch=_sealed(launch), cwd=cwd,
                watch_paths=list(watch_paths), count=count))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return resp.ready

    async def close_session(self, *, lease_id: str = "", session_key: str = "",
                            reason: str = "") -> Closed:
        """``CloseSession``: verify, then reap ``lease_id`` (or, without it, the open lease
        of ``session_key``)."""
        try:
            m = await self._stub.CloseSession(pb.CloseSessionRequest(
                lease_id=lease_id, session_key=session_key, reason=reason))
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return Closed(_lease(m.lease), tuple(m.terminated_pids), tuple(m.surviving_pids),
                      m.unverified_reason)

    async def list_leases(self, state: LeaseState = LeaseState.UNSPECIFIED,
                          session_key: str = "", *, wait_secs: float | None = None,
                          ) -> list[Lease]:
        """``ListLeases``, filtered by state (UNSPECIFIED: all) and/or session key."""
        try:
            resp = await self._stub.ListLeases(pb.ListLeasesRequest(
                state=_WIRE_STATE[state], session_key=session_key), timeout=wait_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return [_lease(m) for m in resp.leases]

    async def verify_owned_tree(self, lease_id: str, *, with_usage: bool = False,
                                wait_secs: float | None = None) -> OwnedTree:
        """``VerifyOwnedTree`` (read-only), with each process's memory and CPU if asked."""
        try:
            m = await self._stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(
                lease_id=lease_id, with_usage=with_usage), timeout=wait_secs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc(exc) from None
        return OwnedTree(m.verified, m.reason, m.root_gone, tuple(
            OwnedProcess(p.pid, p.ppid, p.pgid, p.depth, tuple(p.cmdline), p.rss_bytes,
                         p.cpu_seconds) for p in m.processes))
