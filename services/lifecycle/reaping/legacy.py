"""Old session records without a lease id: the fail-safe legacy path (SPEC §13).

The seed's compatibility notes: such a record is reaped only when its stored
PID is alive (with its birth identity, if the record kept one) and the live
root either runs under this gateway's wrapper root or runs exactly the stored
command. Anything else is left alone.

Where the records come from: the pre-lease record files an operator drops into
``<data dir>/lifecycle/legacy/`` (:mod:`services.lifecycle.reaping.legacy_files`), imported
and processed once by the service holding slot 0 (:mod:`services.lifecycle.startup.legacy_records`).

On top of the seed's rules, a live root is never a legacy record's when
- its tree carries a lease id in its environment: it is a lease's (a live slot's
  wrapper, which runs under the same wrapper root, or its adapter), however well it
  matches the stored command;
- its tree holds the process doing the reaping (``protect``): a stored command
  matching, say, the shell acpgate runs under never takes the service down with it;
- the record names a wrapper root other than this install's: another install's
  wrappers are never this install's to reap;
- it runs as another user (or changed uid, or its uid cannot be read): whatever its
  command line, it is not acpgate's (every signal checks that again, for any tree).
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, fields

from services.lifecycle.processes.snapshot import children_first, descendants
from services.lifecycle.processes.table import ProcessTable
from services.lifecycle.processes.verify import (
    LEASE_ENV,
    REASON_BIRTH,
    REASON_COMMAND,
    REASON_ROOT_GONE,
    REASON_UNREADABLE,
    REASON_WRAPPER_ROOT,
    Refused,
    Verification,
    list_snapshot,
    path_under,
    same_path,
)
from services.lifecycle.reaping.results import CloseResult

__all__ = [
    "ENDED_LEGACY_STATES",
    "REASON_FOREIGN_ROOT",
    "REASON_LEASED",
    "REASON_OTHER_USER",
    "REASON_PROTECTED",
    "LegacyCloseResult",
    "LegacyRecord",
    "LegacyState",
    "legacy_command_matches",
    "legacy_result",
    "unverified_legacy",
    "verify_legacy",
]

REASON_LEASED = "process belongs to a lease (a lease id in its environment)"
REASON_PROTECTED = "process tree holds the lifecycle service itself"
REASON_FOREIGN_ROOT = "record names another install's wrapper root"
REASON_NO_WRAPPER_ROOT = "wrapper record without a wrapper root"
REASON_OTHER_USER = "process runs as another user than acpgate's"


class LegacyState(enum.StrEnum):
    """Where a legacy record is: pending until processed, then one of the three ends."""

    PENDING = "pending"
    #: Verified and reaped.
    CLOSED = "closed"
    #: Its process was provably gone already: nothing signalled.
    LOST = "lost"
    #: Not provably the record's (or the survivors of a refused re-verification):
    #: left alone, never signalled again.
    LEFT = "left"


ENDED_LEGACY_STATES = (LegacyState.CLOSED, LegacyState.LOST, LegacyState.LEFT)


@dataclass(frozen=True)
class LegacyRecord:
    """An old session record without a lease id (the seed's compatibility notes)."""

    pid: int
    #: The stored root command, possibly shell-quoted.
    command: str
    #: The wrapper root the record was spawned under ("" with ``expects_wrapper``:
    #: this install's).
    wrapper_root: str = ""
    expects_wrapper: bool = False
    #: Birth identity if the record kept one (0 = unknown).
    start_time: int = 0


@dataclass(frozen=True)
class LegacyCloseResult(CloseResult):
    """What :meth:`~services.lifecycle.reaping.reaper.Reaper.close_legacy` did, and where the
    record goes (there is no lease to carry that)."""

    state: LegacyState = LegacyState.LEFT


def legacy_result(result: CloseResult, state: LegacyState) -> LegacyCloseResult:
    """``result`` as a legacy result ending in ``state``."""
    values = {f.name: getattr(result, f.name) for f in fields(CloseResult)}
    return LegacyCloseResult(**values, state=state)


def unverified_legacy(verification: Verification) -> LegacyCloseResult:
    """The result of a record that did not verify: lost when its root is provably gone,
    else left; nothing signalled either way."""
    state = LegacyState.LOST if verification.root_gone else LegacyState.LEFT
    return LegacyCloseResult(None, unverified_reason=verification.reason, state=state)


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


def _wrapper_root(record: LegacyRecord, own_wrapper_root: str) -> str:
    """The wrapper root a wrapper record is verified under; refused when it is not ours."""
    root = record.wrapper_root or own_wrapper_root
    if not root:
        raise Refused(Verification(False, REASON_NO_WRAPPER_ROOT))
    if own_wrapper_root and not same_path(root, own_wrapper_root):
        raise Refused(Verification(False, REASON_FOREIGN_ROOT))
    return root


async def verify_legacy(
    record: LegacyRecord,
    table: ProcessTable,
    *,
    own_wrapper_root: str = "",
    protect: int = 0,
) -> Verification:
    """The fail-safe legacy path: live root, wrapper-root ownership or exact command.

    ``own_wrapper_root``: this install's wrapper root (a wrapper record naming another
    is refused; one naming none is verified under it). ``protect``: a PID that must not
    be in the tree (the reaping service's own; 0 = none).
    """
    if record.pid <= 1:
        return Verification(False, "legacy record has no usable PID")
    try:
        wrapper_root = _wrapper_root(record, own_wrapper_root) if record.expects_wrapper else ""
        snapshot = await list_snapshot(table)
    except Refused as refused:
        return refused.verdict
    if record.pid in snapshot.unreadable:
        return Verification(False, REASON_UNREADABLE, evidence_unavailable=True)
    root = snapshot.by_pid.get(record.pid)
    if root is None or root.zombie:
        return Verification(False, REASON_ROOT_GONE, root_gone=True)
    if record.start_time and root.start_time != record.start_time:
        return Verification(False, REASON_BIRTH, root_gone=True)
    if record.expects_wrapper:
        if not any(path_under(arg, wrapper_root) for arg in root.cmdline):
            return Verification(False, REASON_WRAPPER_ROOT)
    elif not legacy_command_matches(record.command, root.cmdline):
        return Verification(False, REASON_COMMAND)
    if not await table.runs_as_service(root):
        return Verification(False, REASON_OTHER_USER)
    tree = descendants(root, snapshot)
    if protect and protect in tree:
        return Verification(False, REASON_PROTECTED)
    live = [t for t in tree.values() if not t.info.zombie]
    if await table.environ_keys([t.info for t in live], [LEASE_ENV]):
        return Verification(False, REASON_LEASED)
    return Verification(True, "", processes=children_first(live))
