"""``acpgate ps``: what this install runs now, gathered from its services.

From each running target (:func:`acpgate.ops.client.find_targets`), at once:
the live sessions and what their edges last reported of them (the session
service's ``ListLiveSessions``), the lifecycle service's instance and its
leases (``GetInstance``, ``ListLeases``); then every live lease's verified
process tree with each process's memory and CPU (``VerifyOwnedTree`` with
``with_usage``, asked of the lease's own lifecycle service when it is
reachable). Owners are shown by their token's name (``acpgate token list``'s
label; never the token): the sessions a token owns are ``client:<token id>``'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from acpgate.ops.client import (
    CALL_TIMEOUT_SECS,
    Connected,
    OpsError,
    Target,
    connect_all,
    describe,
    find_targets,
    operator_security,
)
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as lpb
from acpgate_contracts.session.v1 import session_pb2 as spb
from services.common import principals
from services.common.config import Config
from services.edge.sessions.worker_link import split_worker_name
from services.edge.tokens import TokenStore, token_db_path
from services.lifecycle.adapters.session_logs import session_log_path, session_of_key

__all__ = ["LeaseView", "ProcessView", "PsReport", "ServiceView", "SessionView", "gather",
           "owner_label", "owner_names"]

_LIVE_LEASES = (lpb.LEASE_STATE_OPEN, lpb.LEASE_STATE_CLOSING, lpb.LEASE_STATE_WARM)
_LEASE_STATE = {lpb.LEASE_STATE_OPEN: "open", lpb.LEASE_STATE_CLOSING: "closing",
                lpb.LEASE_STATE_WARM: "warm", lpb.LEASE_STATE_CLOSED: "closed",
                lpb.LEASE_STATE_LOST: "lost"}
_ACTIVITY = {spb.ACTIVITY_STATE_UNSPECIFIED: "unknown", spb.ACTIVITY_STATE_SETTING_UP:
             "setting-up", spb.ACTIVITY_STATE_IDLE: "idle", spb.ACTIVITY_STATE_TURN: "turn",
             spb.ACTIVITY_STATE_WAITING: "waiting"}
#: Leases verified at once (each one reads the process table).
_VERIFY_AT_ONCE = 8


@dataclass
class ServiceView:
    """One target as ps reached it."""

    name: str
    session_addr: str
    lifecycle_addr: str
    gateway: str = ""
    instance_id: str = ""
    error: str = ""
    #: Why its session service keeps sessions in memory ("" when it stores them).
    store_in_memory: str = ""


@dataclass
class ProcessView:
    """One process of a lease's verified tree."""

    pid: int
    ppid: int
    role: str
    depth: int
    rss_bytes: int
    cpu_seconds: float
    command: list[str]


@dataclass
class LeaseView:
    """One lease (a wrapper and its adapter) and its live processes."""

    lease_id: str
    state: str
    session_key: str
    session_id: str
    instance_id: str
    started_at: int
    root_pid: int
    adapter_pid: int
    verified: bool
    why: str = ""
    processes: list[ProcessView] = field(default_factory=list)

    @property
    def rss_bytes(self) -> int:
        """The whole tree's resident memory."""
        return sum(p.rss_bytes for p in self.processes)

    @property
    def cpu_seconds(self) -> float:
        """The whole tree's CPU time."""
        return sum(p.cpu_seconds for p in self.processes)


@dataclass
class SessionView:
    """One live session."""

    session_id: str
    title: str
    agent: str
    owner: str
    state: str
    waiting_requests: int
    created_at: int
    last_activity: int
    reported_at: int
    workspace: str
    instance_id: str
    host: str
    served_by: str
    log: str
    lease: LeaseView | None = None
    #: Client connections attached now (0 while detached).
    clients: int = 1


@dataclass
class PsReport:
    """Everything ``acpgate ps`` shows."""

    config_dir: str
    now: int
    services: list[ServiceView] = field(default_factory=list)
    sessions: list[SessionView] = field(default_factory=list)
    leases: list[LeaseView] = field(default_factory=list)


@dataclass
class _Reached:
    view: ServiceView
    live: list[spb.LiveSession] = field(default_factory=list)
    leases: list[lpb.Lease] = field(default_factory=list)
    state_dir: str = ""


async def _reach(conn: Connected) -> _Reached:
    target = conn.target
    reached = _Reached(ServiceView(target.name, target.session_addr, target.lifecycle_addr,
                                   target.gateway))
    try:
        instance = await conn.lifecycle.GetInstance(lpb.GetInstanceRequest(),
                                                    timeout=CALL_TIMEOUT_SECS)
        reached.view.instance_id, reached.state_dir = (instance.gateway_instance_id,
                                                       instance.state_dir)
        leases = await conn.lifecycle.ListLeases(lpb.ListLeasesRequest(),
                                                 timeout=CALL_TIMEOUT_SECS)
        reached.leases = [x for x in leases.leases if x.state in _LIVE_LEASES]
    except grpc.aio.AioRpcError as exc:
        reached.view.error = describe(exc, target.lifecycle_addr)
        return reached
    try:
        live = await conn.session.ListLiveSessions(spb.ListLiveSessionsRequest(),
                                                   timeout=CALL_TIMEOUT_SECS)
        reached.live = list(live.sessions)
        store = await conn.session.GetStoreStatus(spb.GetStoreStatusRequest(),
                                                  timeout=CALL_TIMEOUT_SECS)
        if not store.persistent:
            reached.view.store_in_memory = store.fallback_reason or "unknown reason"
    except grpc.aio.AioRpcError as exc:
        reached.view.error = describe(exc, target.session_addr)
    return reached


def _role(process: lpb.OwnedProcess, lease: lpb.Lease) -> str:
    if process.depth == 0:
        return "wrapper"
    return "adapter" if process.pid == lease.adapter_pid else "child"


async def _lease_view(conn: Connected, lease: lpb.Lease) -> LeaseView:
    found = session_of_key(lease.session_key)
    view = LeaseView(lease.lease_id, _LEASE_STATE.get(lease.state, "?"), lease.session_key,
                     found[1] if found else "", lease.gateway_instance_id, lease.started_at,
                     lease.root_pid, lease.adapter_pid, verified=False)
    try:
        tree = await conn.lifecycle.VerifyOwnedTree(
            lpb.VerifyOwnedTreeRequest(lease_id=lease.lease_id, with_usage=True),
            timeout=CALL_TIMEOUT_SECS)
    except grpc.aio.AioRpcError as exc:
        view.why = describe(exc, conn.target.lifecycle_addr)
        return view
    view.verified, view.why = tree.verified, tree.reason
    view.processes = [ProcessView(p.pid, p.ppid, _role(p, lease), p.depth, p.rss_bytes,
                                  round(p.cpu_seconds, 2), list(p.cmdline))
                      for p in sorted(tree.processes, key=lambda p: (p.depth, p.pid))]
    return view


def owner_names(cfg: Config) -> dict[str, str]:
    """Token id → its label (``acpgate token list``), for the owner column."""
    try:
        return {t.token_id: t.name for t in TokenStore(token_db_path(cfg)).list()}
    except Exception:  # an unreadable token store costs only the names
        return {}


def owner_label(row: spb.SessionRow, names: dict[str, str]) -> str:
    """Who owns ``row``: ``local``, or its token's label (``token <id>`` when unnamed)."""
    return principals.owner_label(row.ownership.owner_session_key, names)


def _best(lives: Iterable[spb.LiveSession]) -> spb.LiveSession:
    """Of one session's entries (several targets list it), the freshest report."""
    return max(lives, key=lambda live: live.reported_at)


async def gather(cfg: Config, *, with_leases: bool = False) -> PsReport:
    """Ask every target; a target that cannot be reached is reported with why."""
    targets: list[Target] = await asyncio.to_thread(find_targets, cfg)
    report = PsReport(str(cfg.config_dir), int(time.time() * 1000))
    if not targets:
        return report
    security = await asyncio.to_thread(operator_security, cfg)
    async with connect_all(security, targets) as conns:
        reached = await asyncio.gather(*(_reach(c) for c in conns))
        report.services = [r.view for r in reached]
        ok = [(c, r) for c, r in zip(conns, reached, strict=True) if not r.view.error]
        if not ok and reached:
            raise OpsError("; ".join(r.view.error for r in reached))
        by_instance = {r.view.instance_id: c for c, r in ok}
        leases = {x.lease_id: x for _, r in ok for x in r.leases}
        gate = asyncio.Semaphore(_VERIFY_AT_ONCE)

        async def verified(lease: lpb.Lease) -> LeaseView:
            async with gate:
                return await _lease_view(by_instance.get(lease.gateway_instance_id, ok[0][0]),
                                         lease)
        views = {v.lease_id: v for v in await asyncio.gather(*map(verified, leases.values()))}
    state_dir = next((r.state_dir for _, r in ok if r.state_dir), "")
    names = await asyncio.to_thread(owner_names, cfg)
    served_by = {r.view.instance_id: r.view.name for _, r in ok}
    entries: dict[str, list[spb.LiveSession]] = {}
    for _, r in ok:
        for live in r.live:
            entries.setdefault(live.session.session_id, []).append(live)
    for sid, lives in entries.items():
        live = _best(lives)
        row, activity = live.session, live.activity
        lease = views.get(activity.lease_id or row.lease_id) or next(
            (v for v in views.values() if v.session_id == sid and v.state == "open"), None)
        report.sessions.append(SessionView(
            sid, row.title, row.agent_alias, owner_label(row, names),
            _ACTIVITY.get(activity.state, "unknown"), activity.waiting_requests,
            row.created_at, activity.last_activity or row.last_activity, live.reported_at,
            row.workspace_dir, row.claim.instance_id, row.claim.host,
            _served_by(served_by, row),
            str(session_log_path(Path(state_dir), sid)) if state_dir else "", lease,
            clients=activity.attached_clients))
        if activity.detached:  # its client went; it waits for the owner's next connection
            report.sessions[-1].state = "detached"
    report.sessions.sort(key=lambda s: s.created_at)
    if with_leases:
        report.leases = sorted(views.values(), key=lambda v: v.started_at)
    return report


def _served_by(served_by: dict[str, str], row: spb.SessionRow) -> str:
    """Which target serves the row: its name (with the edge worker's number when one of
    several holds it), else the claim's host."""
    instance, worker = split_worker_name(row.claim.instance_id)
    name = served_by.get(instance)
    if name is None:
        return row.claim.host or "another host"
    return f"{name} (edge worker {worker})" if worker else name
