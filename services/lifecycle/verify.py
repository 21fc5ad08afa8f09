"""VerifyOwnedTree: does the live process tree still belong to a lease? (SPEC §13)

Evidence, all from the live process table, never from stored PIDs alone:

- the lease is this gateway's (instance id) and its wrapper lives under this
  gateway's wrapper root;
- the root PID is alive with the recorded birth identity (start time);
- the root's live argv names the wrapper path and hashes to ``command_hash``
  (exact argv from the kernel, so shell quoting can never confuse it);
- the adapter, when still a child of the root, leads the recorded process group;
- the root's environment carries the lease id and instance id, where readable.

The tree is the root's descendants by parent links plus the members of the
lease's process group. Group members outside the parent links are taken only
while the group is pinned by our adapter (alive or unreaped under the root) or
when their environment carries the lease id. Anything unknowable fails closed.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from services.lifecycle.leases import LeaseRecord
from services.lifecycle.proctable import ProcessTable, ProcessTableError, ProcInfo

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
class TreeProc:
    """A process of a verified tree, with its depth below the root (0 = root)."""

    info: ProcInfo
    depth: int


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


def children_first(procs: Sequence[TreeProc]) -> tuple[TreeProc, ...]:
    """Deepest first; ties by PID for a stable order."""
    return tuple(sorted(procs, key=lambda p: (-p.depth, p.info.pid)))


class ProcSnapshot:
    """One process listing, indexed by PID, parent and group, so that verifying many
    leases against it costs one pass over the table, not one per lease."""

    def __init__(self, procs: Sequence[ProcInfo]) -> None:
        #: Processes that exist but could not be read: kept apart, so they never
        #: join a tree, a group or a candidate list, yet never count as gone.
        self.unreadable: frozenset[int] = frozenset(p.pid for p in procs if p.unreadable)
        self.procs: tuple[ProcInfo, ...] = tuple(p for p in procs if not p.unreadable)
        self.by_pid: dict[int, ProcInfo] = {}
        self.children: dict[int, list[ProcInfo]] = {}
        self.by_pgid: dict[int, list[ProcInfo]] = {}
        for p in self.procs:
            self.by_pid[p.pid] = p
            self.children.setdefault(p.ppid, []).append(p)
            self.by_pgid.setdefault(p.pgid, []).append(p)

    def group(self, pgid: int) -> list[ProcInfo]:
        """Members of process group ``pgid``, in listing order."""
        return self.by_pgid.get(pgid, [])


def _descendants(root: ProcInfo, snap: ProcSnapshot) -> dict[int, TreeProc]:
    children = snap.children
    tree: dict[int, TreeProc] = {root.pid: TreeProc(root, 0)}
    frontier = [root]
    while frontier:
        nxt: list[ProcInfo] = []
        for parent in frontier:
            depth = tree[parent.pid].depth + 1
            for child in children.get(parent.pid, []):
                # A child cannot be older than its parent: that would be a reused PID link.
                if child.pid in tree or child.start_time < parent.start_time:
                    continue
                tree[child.pid] = TreeProc(child, depth)
                nxt.append(child)
        frontier = nxt
    return tree


def _env_marks(env: Mapping[str, str] | None, lease_id: str, instance_id: str) -> bool:
    return env is not None and env.get(LEASE_ENV) == lease_id and env.get(INSTANCE_ENV) == instance_id


async def _marked_group_members(
    lease: LeaseRecord, snap: ProcSnapshot, table: ProcessTable, instance_id: str
) -> list[TreeProc]:
    """Members of the lease's group whose environment proves they are the lease's."""
    if lease.process_group_id is None or lease.process_group_id <= 1:
        return []
    found: list[TreeProc] = []
    for p in snap.group(lease.process_group_id):
        if p.pgid != lease.process_group_id or p.zombie or p.pid == lease.root_pid:
            continue
        if p.start_time < lease.root_start_time:
            continue  # born before our wrapper: cannot be its descendant
        env = await table.environ(p.pid, p.start_time)
        if _env_marks(env, lease.lease_id, instance_id):
            found.append(TreeProc(p, 2))
    return found


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
    """
    if lease.gateway_instance_id != owner.instance_id:
        return Verification(False, REASON_OTHER_INSTANCE)
    if not same_path(lease.wrapper_root, owner.wrapper_root) or not path_under(
        lease.wrapper_path, lease.wrapper_root
    ):
        return Verification(False, REASON_WRAPPER_ROOT)
    if snapshot is None:
        try:
            snapshot = ProcSnapshot(await table.list_all())
        except ProcessTableError as exc:
            return Verification(False, f"{REASON_LISTING}: {exc}", evidence_unavailable=True)
    procs = snapshot.procs
    by_pid = snapshot.by_pid

    recovered: ProcInfo | None = None
    if lease.pending:
        candidates = find_pending_candidates(lease, procs, owner.instance_id)
        if len(candidates) > 1:
            return Verification(False, REASON_AMBIGUOUS)
        if not candidates:
            return Verification(False, REASON_PENDING_GONE, root_gone=True)
        recovered = candidates[0]
        root: ProcInfo | None = recovered
        expected_start = recovered.start_time
    else:
        if lease.root_pid in snapshot.unreadable:
            # It exists: "gone" would be a guess. Unverifiable → fail closed, retry later.
            return Verification(False, REASON_UNREADABLE, evidence_unavailable=True)
        root = by_pid.get(lease.root_pid)
        expected_start = lease.root_start_time

    if root is None or root.zombie or root.start_time != expected_start:
        reason = REASON_ROOT_GONE if root is None or root.zombie else REASON_BIRTH
        stragglers = await _marked_group_members(lease, snapshot, table, owner.instance_id)
        return Verification(
            bool(stragglers),
            reason,
            root_gone=True,
            processes=children_first(stragglers),
        )

    argv = list(root.cmdline)
    if not argv:
        # An exiting process has released its memory but is not yet a zombie:
        # nothing can be proven this instant; a retry will see it gone.
        return Verification(False, REASON_EXITING, evidence_unavailable=True, recovered_root=recovered)
    if lease.wrapper_path not in argv:
        return Verification(False, REASON_WRAPPER_ROOT, recovered_root=recovered)
    if command_hash(argv) != lease.command_hash:
        return Verification(False, REASON_COMMAND, recovered_root=recovered)
    env = await table.environ(root.pid, root.start_time)
    if env is not None and not _env_marks(env, lease.lease_id, owner.instance_id):
        return Verification(False, REASON_ENV, recovered_root=recovered)

    adapter = by_pid.get(lease.adapter_pid) if lease.adapter_pid else None
    anchored = adapter is not None and adapter.ppid == root.pid
    if (
        anchored
        and adapter is not None
        and lease.process_group_id is not None
        and adapter.pgid != lease.process_group_id
    ):
        return Verification(False, REASON_PGID, recovered_root=recovered)

    tree = _descendants(root, snapshot)
    notes: list[str] = []
    if lease.process_group_id is not None and lease.process_group_id > 1:
        for p in snapshot.group(lease.process_group_id):
            if p.pgid != lease.process_group_id or p.pid in tree or p.zombie:
                continue
            if p.start_time < root.start_time:
                notes.append(f"pid {p.pid} in the group but older than the wrapper: skipped")
                continue
            if anchored:
                tree[p.pid] = TreeProc(p, 2)
                continue
            env_p = await table.environ(p.pid, p.start_time)
            if _env_marks(env_p, lease.lease_id, owner.instance_id):
                tree[p.pid] = TreeProc(p, 2)
            else:
                notes.append(f"pid {p.pid} in the group without lease evidence: skipped")
    live = [t for t in tree.values() if not t.info.zombie]
    return Verification(
        True,
        "",
        processes=children_first(live),
        recovered_root=recovered,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------- legacy records


@dataclass(frozen=True)
class LegacyRecord:
    """An old session record without a lease id (the seed's compatibility notes)."""

    pid: int
    #: The stored root command, possibly shell-quoted.
    command: str
    #: The wrapper root the record was spawned under ("" when not a wrapper).
    wrapper_root: str = ""
    expects_wrapper: bool = False
    #: Birth identity if the record kept one (0 = unknown).
    start_time: int = 0


def legacy_command_matches(stored: str, live: Sequence[str]) -> bool:
    """The stored command (shell-quoted or not) equals the live argv exactly."""
    if not live:
        return False
    try:
        if shlex.split(stored) == list(live):
            return True
    except ValueError:
        pass
    return stored == " ".join(live)


async def verify_legacy(record: LegacyRecord, table: ProcessTable) -> Verification:
    """The fail-safe legacy path: live root, wrapper-root ownership or exact command."""
    if record.pid <= 1:
        return Verification(False, "legacy record has no usable PID")
    try:
        snapshot = ProcSnapshot(await table.list_all())
    except ProcessTableError as exc:
        return Verification(False, f"{REASON_LISTING}: {exc}", evidence_unavailable=True)
    if record.pid in snapshot.unreadable:
        return Verification(False, REASON_UNREADABLE, evidence_unavailable=True)
    root = snapshot.by_pid.get(record.pid)
    if root is None or root.zombie:
        return Verification(False, REASON_ROOT_GONE, root_gone=True)
    if record.start_time and root.start_time != record.start_time:
        return Verification(False, REASON_BIRTH, root_gone=True)
    if record.expects_wrapper:
        if not any(path_under(arg, record.wrapper_root) for arg in root.cmdline):
            return Verification(False, REASON_WRAPPER_ROOT)
    elif not legacy_command_matches(record.command, root.cmdline):
        return Verification(False, REASON_COMMAND)
    tree = _descendants(root, snapshot)
    live = [t for t in tree.values() if not t.info.zombie]
    return Verification(True, "", processes=children_first(live))
