"""One process listing, indexed, and the process trees read from it.

A reap pass verifies many leases against a single listing: :class:`ProcSnapshot`
indexes it once by PID, parent and group (and reads the environments it is asked
about once). A tree is a set of :class:`TreeProc`
(a process and its depth below the root), signalled children first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.lifecycle.processes.table import ProcessTable, ProcInfo

#: A process's ``(pid, start_time)``: what a signal is addressed to.
Identity = tuple[int, int]


@dataclass(frozen=True)
class TreeProc:
    """A process of a verified tree, with its depth below the root (0 = root)."""

    info: ProcInfo
    depth: int


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
        self._environ: dict[tuple[str, ...], dict[Identity, dict[str, str]]] = {}

    async def environ_keys(
        self, table: ProcessTable, keys: Sequence[str]
    ) -> dict[Identity, dict[str, str]]:
        """``keys`` from the environment of every live process listed, read once per snapshot.

        A reap pass verifying many leases against one listing scans ``/proc`` once,
        not once per lease. See :meth:`ProcessTable.environ_keys`.
        """
        wanted = tuple(keys)
        cached = self._environ.get(wanted)
        if cached is None:
            live = [p for p in self.procs if not p.zombie and p.pid > 1]
            cached = self._environ[wanted] = await table.environ_keys(live, wanted)
        return cached

    def group(self, pgid: int) -> list[ProcInfo]:
        """Members of process group ``pgid``, in listing order."""
        return self.by_pgid.get(pgid, [])


def descendants(root: ProcInfo, snap: ProcSnapshot) -> dict[int, TreeProc]:
    """``root`` and its descendants by parent links in ``snap``, keyed by PID, with depths."""
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
