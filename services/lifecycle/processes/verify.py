"""VerifyOwnedTree: does the live process tree still belong to a lease? (SPEC §13)

Evidence, all from the live process table, never from stored PIDs alone:

- the lease is this gateway's (instance id) and its wrapper lives under this
  gateway's wrapper root;
- the root PID is alive with the recorded birth identity (start time);
- the root's live argv names the wrapper path and hashes to ``command_hash``
  (exact argv from the kernel, so shell quoting can never confuse it), and the
  root really runs the wrapper file: ``<python> -I -S <wrapper path>`` under
  the executable its ``argv[0]`` names (not an ``exec -a`` alias);
- the adapter, when still a child of the root, leads the recorded process group;
- the root's environment carries the lease id and instance id, where readable.

The tree is the root's descendants by parent links plus the members of the
lease's process group. Group members outside the parent links are taken only
while the group is pinned by our adapter (alive or unreaped under the root) or
when their environment carries the lease id. Once the root is gone (its wrapper
died or ended), what is left is every process whose environment carries the
lease id and this gateway's instance id and that was born after the wrapper:
that finds a ``setsid`` grandchild re-parented to PID 1 too. Anything
unknowable fails closed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from services.lifecycle.leases.store import LeaseRecord
from services.lifecycle.processes.snapshot import (
    ProcSnapshot,
    TreeProc,
    children_first,
    descendants,
)
from services.lifecycle.processes.table import ProcessTable, ProcessTableError, ProcInfo

LEASE_ENV = "ACPGATE_LEASE_ID"
INSTANCE_ENV = "ACPGATE_GATEWAY_INSTANCE_ID"

REASON_OTHER_INSTANCE = "lease belongs to another gateway instance"
REASON_WRAPPER_ROOT = "wrapper is not under this gateway's wrapper root"
REASON_LISTING = "process listing unavailable"
REASON_ROOT_GONE = "root process gone"
REASON_BIRTH = "birth identity mismatch (PID reused)"
REASON_COMMAND = "live command does not match the lease"
REASON_ENV = "live environment does not carry the lease id"
REASON_PGID = "process group does not match the lease"
REASON_AMBIGUOUS = "pending lease is ambiguous: more than one live wrapper matches"
REASON_PENDING_GONE = "pending lease has no live wrapper"
REASON_EXITING = "root command line unreadable (process exiting or permission denied)"
REASON_UNREADABLE = "root process exists but cannot be read"
REASON_NOT_WRAPPER = "root process does not run this gateway's wrapper"
REASON_EXECUTABLE = "root's executable is not the interpreter its command names"

#: How the lifecycle service runs the wrapper file: ``<python> -I -S <wrapper path> …``.
WRAPPER_INTERPRETER_FLAGS = ("-I", "-S")


def command_hash(argv: Sequence[str]) -> str:
    """sha256 hex of the NUL-joined argv (how a lease remembers its wrapper command)."""
    return hashlib.sha256("\0".join(argv).encode("utf-8", "surrogateescape")).hexdigest()


def path_under(path: str, root: str) -> bool:
    """True if ``path`` lies strictly inside ``root`` (lexically, after normalisation)."""
    if not path or not root:
        return False
    p = os.path.normpath(path)
    r = os.path.normpath(root)
    return p != r and p.startswith(r.rstrip("/") + "/")


def same_path(a: str, b: str) -> bool:
    """Lexical path equality after normalisation (no filesystem access)."""
    return os.path.normpath(a) == os.path.normpath(b)


@dataclass(frozen=True)
class Owner:
    """Who is asking: this gateway's instance id and wrapper root."""

    instance_id: str
    wrapper_root: str


@dataclass(frozen=True)
class Verification:
    """The outcome of a verification."""

    verified: bool
    reason: str = ""
    #: The lease's root is provably gone (absent, zombie, or another birth).
    root_gone: bool = False
    #: The table could not answer: nothing can be concluded, retry later.
    evidence_unavailable: bool = False
    #: Children first (deepest first, root last).
    processes: tuple[TreeProc, ...] = ()
    #: For a pending lease: the wrapper found by exact match.
    recovered_root: ProcInfo | None = None
    notes: tuple[str, ...] = field(default=())


class Refused(Exception):
    """A step of :func:`verify_owned_tree` cannot prove the tree is the lease's.

    ``verdict`` is the fail-closed answer the verification ends with.
    """

    def __init__(self, verdict: Verification) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


@dataclass(frozen=True)
class RootLocation:
    """Where the lease's root stands in one listing."""

    #: The process at the root's PID (for a pending lease: the recovered wrapper).
    info: ProcInfo | None
    #: The birth identity the root must have.
    expected_start: int
    #: For a pending lease: the wrapper found by exact match.
    recovered: ProcInfo | None = None

    def live_root(self) -> ProcInfo | None:
        """The root, alive with the expected birth; None when it is provably gone."""
        root = self.info
        if root is None or root.zombie or root.start_time != self.expected_start:
            return None
        return root

    @property
    def gone_reason(self) -> str:
        """Why the root counts as gone: absent or exited, or another birth on its PID."""
        return REASON_ROOT_GONE if self.info is None or self.info.zombie else REASON_BIRTH


async def verify_owned_tree(
    lease: LeaseRecord,
    table: ProcessTable,
    owner: Owner,
    snapshot: ProcSnapshot | None = None,
) -> Verification:
    """Verify that the live tree belongs to ``lease``; fail closed on any doubt.

    ``snapshot`` is a listing the caller just took from ``table`` (one snapshot
    shared by many leases in a reap pass); None lists the table here. Every other
    check (birth identity, argv, environment, group) is the same either way.
    Each step either passes or raises :class:`Refused` with the verdict.
    """
    try:
        check_owner(lease, owner)
        snap = snapshot if snapshot is not None else await list_snapshot(table)
        located = locate_root(lease, snap, owner.instance_id)
        root = located.live_root()
        if root is None:
            return await verify_gone_root(lease, located, snap, table, owner.instance_id)
        check_root_command(lease, root, located.recovered)
        await check_root_runs_wrapper(lease, root, table, located.recovered)
        await check_root_environment(lease, root, table, owner.instance_id, located.recovered)
        anchored = adapter_anchors_group(lease, root, snap, located.recovered)
        tree = descendants(root, snap)
        notes = await join_group(tree, lease, root, snap, table, owner.instance_id, anchored)
    except Refused as refused:
        return refused.verdict
    live = [t for t in tree.values() if not t.info.zombie]
    return Verification(
        True,
        "",
        processes=children_first(live),
        recovered_root=located.recovered,
        notes=tuple(notes),
    )


def check_owner(lease: LeaseRecord, owner: Owner) -> None:
    """The lease is this gateway's and its wrapper lies under this gateway's wrapper root."""
    if lease.gateway_instance_id != owner.instance_id:
        raise Refused(Verification(False, REASON_OTHER_INSTANCE))
    if not same_path(lease.wrapper_root, owner.wrapper_root) or not path_under(
        lease.wrapper_path, lease.wrapper_root
    ):
        raise Refused(Verification(False, REASON_WRAPPER_ROOT))


async def list_snapshot(table: ProcessTable) -> ProcSnapshot:
    """One listing of ``table``; refused as "evidence unavailable" when it cannot be read."""
    try:
        return ProcSnapshot(await table.list_all())
    except ProcessTableError as exc:
        raise Refused(
            Verification(False, f"{REASON_LISTING}: {exc}", evidence_unavailable=True)
        ) from None


def locate_root(lease: LeaseRecord, snap: ProcSnapshot, instance_id: str) -> RootLocation:
    """The lease's root in ``snap``.

    A pending lease (spawned, root never recorded) is recovered only from exactly
    one live wrapper naming its wrapper path, lease id and instance id: none is a
    gone root, more than one is ambiguous. A recorded root that exists but cannot
    be read is unverifiable now ("gone" would be a guess): refused, retry later.
    """
    if lease.pending:
        candidates = find_pending_candidates(lease, snap.procs, instance_id)
        if len(candidates) > 1:
            raise Refused(Verification(False, REASON_AMBIGUOUS))
        if not candidates:
            raise Refused(Verification(False, REASON_PENDING_GONE, root_gone=True))
        recovered = candidates[0]
        return RootLocation(recovered, recovered.start_time, recovered)
    if lease.root_pid in snap.unreadable:
        raise Refused(Verification(False, REASON_UNREADABLE, evidence_unavailable=True))
    return RootLocation(snap.by_pid.get(lease.root_pid), lease.root_start_time)


def find_pending_candidates(
    lease: LeaseRecord, procs: Sequence[ProcInfo], instance_id: str
) -> list[ProcInfo]:
    """Live wrappers whose argv names exactly this wrapper path, lease id and instance id."""
    out: list[ProcInfo] = []
    for p in procs:
        if p.zombie:
            continue
        argv = list(p.cmdline)
        if lease.wrapper_path not in argv:
            continue
        if not _has_option(argv, "--lease-id", lease.lease_id):
            continue
        if not _has_option(argv, "--instance-id", instance_id):
            continue
        out.append(p)
    return out


def _has_option(argv: list[str], name: str, value: str) -> bool:
    return any(argv[i] == name and argv[i + 1] == value for i in range(len(argv) - 1))


async def verify_gone_root(
    lease: LeaseRecord,
    located: RootLocation,
    snap: ProcSnapshot,
    table: ProcessTable,
    instance_id: str,
) -> Verification:
    """The verdict for a provably gone root: only the processes marked with the lease.

    Verified (with those stragglers to reap) when there are any; ``root_gone`` either way.
    """
    stragglers = await marked_stragglers(lease, snap, table, instance_id)
    return Verification(
        bool(stragglers),
        located.gone_reason,
        root_gone=True,
        processes=children_first(stragglers),
    )


async def marked_stragglers(
    lease: LeaseRecord, snap: ProcSnapshot, table: ProcessTable, instance_id: str
) -> list[TreeProc]:
    """What is left of a lease whose wrapper is gone: every live process that proves it
    is the lease's, wherever it now hangs (its group, re-parented to PID 1 or to a
    subreaper, in a session of its own after ``setsid``).

    Proof is all of: the lease id *and* this gateway's instance id in its
    environment (another install's process never matches), and a birth no
    earlier than the wrapper's (an older process cannot descend from it). An
    environment that cannot be read proves nothing. Depths follow the parent
    links among the stragglers, so the deepest is signalled first.
    """
    marks = await snap.environ_keys(table, (LEASE_ENV, INSTANCE_ENV))
    found: dict[int, ProcInfo] = {}
    for p in snap.procs:
        if p.zombie or p.pid <= 1 or p.pid == lease.root_pid:
            continue
        if p.start_time < lease.root_start_time:
            continue  # born before our wrapper: cannot be its descendant
        if _env_marks(marks.get(p.identity), lease.lease_id, instance_id):
            found[p.pid] = p
    return [TreeProc(p, _depth_among(p, found)) for p in found.values()]


def _depth_among(proc: ProcInfo, procs: Mapping[int, ProcInfo]) -> int:
    """1 + the number of ``proc``'s ancestors (by parent links) within ``procs``."""
    depth, seen, cur = 1, {proc.pid}, proc
    while cur.ppid in procs and cur.ppid not in seen:
        cur = procs[cur.ppid]
        seen.add(cur.pid)
        depth += 1
    return depth


def check_root_command(lease: LeaseRecord, root: ProcInfo, recovered: ProcInfo | None) -> None:
    """The root's live argv names the wrapper path and hashes to the lease's command hash."""
    argv = list(root.cmdline)
    if not argv:
        # An exiting process has released its memory but is not yet a zombie:
        # nothing can be proven this instant; a retry will see it gone.
        raise Refused(
            Verification(False, REASON_EXITING, evidence_unavailable=True, recovered_root=recovered)
        )
    if lease.wrapper_path not in argv:
        raise Refused(Verification(False, REASON_WRAPPER_ROOT, recovered_root=recovered))
    if command_hash(argv) != lease.command_hash:
        raise Refused(Verification(False, REASON_COMMAND, recovered_root=recovered))


async def check_root_runs_wrapper(
    lease: LeaseRecord, root: ProcInfo, table: ProcessTable, recovered: ProcInfo | None
) -> None:
    """The root really runs the wrapper file: an interpreter started as
    ``<python> -I -S <wrapper path>``, whose live executable is the program its
    ``argv[0]`` names.

    A record's hash can be made to match any argv, so this relates two live facts
    instead: ``exec -a <wrapper path> …`` or an interpreter copied elsewhere shows
    as an executable that is not what ``argv[0]`` says. Unknowable (the
    executable unreadable, e.g. mid-exit) fails closed.
    """
    argv = tuple(root.cmdline)
    if argv[1:4] != (*WRAPPER_INTERPRETER_FLAGS, lease.wrapper_path):
        raise Refused(Verification(False, REASON_NOT_WRAPPER, recovered_root=recovered))
    matches = await table.runs_argv0(root)
    if matches is None:
        raise Refused(
            Verification(False, REASON_EXITING, evidence_unavailable=True, recovered_root=recovered)
        )
    if not matches:
        raise Refused(Verification(False, REASON_EXECUTABLE, recovered_root=recovered))


async def check_root_environment(
    lease: LeaseRecord,
    root: ProcInfo,
    table: ProcessTable,
    instance_id: str,
    recovered: ProcInfo | None,
) -> None:
    """The root's environment, where readable, carries the lease id and instance id."""
    env = await table.environ(root.pid, root.start_time)
    if env is not None and not _env_marks(env, lease.lease_id, instance_id):
        raise Refused(Verification(False, REASON_ENV, recovered_root=recovered))


def _env_marks(env: Mapping[str, str] | None, lease_id: str, instance_id: str) -> bool:
    return env is not None and env.get(LEASE_ENV) == lease_id and env.get(INSTANCE_ENV) == instance_id


def adapter_anchors_group(
    lease: LeaseRecord, root: ProcInfo, snap: ProcSnapshot, recovered: ProcInfo | None
) -> bool:
    """True when the recorded adapter is still the root's child: it then pins the group.

    An anchored adapter must lead the recorded process group, else refused.
    """
    adapter = snap.by_pid.get(lease.adapter_pid) if lease.adapter_pid else None
    if adapter is None or adapter.ppid != root.pid:
        return False
    if lease.process_group_id is not None and adapter.pgid != lease.process_group_id:
        raise Refused(Verification(False, REASON_PGID, recovered_root=recovered))
    return True


async def join_group(
    tree: dict[int, TreeProc],
    lease: LeaseRecord,
    root: ProcInfo,
    snap: ProcSnapshot,
    table: ProcessTable,
    instance_id: str,
    anchored: bool,
) -> list[str]:
    """Add to ``tree`` the lease's group members outside the parent links; notes on the rest.

    A member joins while the group is pinned by our adapter (``anchored``), else
    only when its environment carries the lease id. Members older than the
    wrapper cannot be its descendants and never join.
    """
    notes: list[str] = []
    pgid = lease.process_group_id
    if pgid is None or pgid <= 1:
        return notes
    for p in snap.group(pgid):
        if p.pgid != pgid or p.pid in tree or p.zombie:
            continue
        if p.start_time < root.start_time:
            notes.append(f"pid {p.pid} in the group but older than the wrapper: skipped")
            continue
        if anchored:
            tree[p.pid] = TreeProc(p, 2)
            continue
        env_p = await table.environ(p.pid, p.start_time)
        if _env_marks(env_p, lease.lease_id, instance_id):
            tree[p.pid] = TreeProc(p, 2)
        else:
            notes.append(f"pid {p.pid} in the group without lease evidence: skipped")
    return notes
