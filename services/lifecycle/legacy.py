"""Old session records without a lease id: the fail-safe legacy path (SPEC §13).

The seed's compatibility notes: such a record is reaped only when its stored
PID is alive (with its birth identity, if the record kept one) and the live
root either runs under this gateway's wrapper root or runs exactly the stored
command. Anything else is left alone.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from services.lifecycle.proctable import ProcessTable
from services.lifecycle.snapshot import children_first, descendants
from services.lifecycle.verify import (
    REASON_BIRTH,
    REASON_COMMAND,
    REASON_ROOT_GONE,
    REASON_UNREADABLE,
    REASON_WRAPPER_ROOT,
    Refused,
    Verification,
    list_snapshot,
    path_under,
)


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
        if not any(path_under(arg, record.wrapper_root) for arg in root.cmdline):
            return Verification(False, REASON_WRAPPER_ROOT)
    elif not legacy_command_matches(record.command, root.cmdline):
        return Verification(False, REASON_COMMAND)
    tree = descendants(root, snapshot)
    live = [t for t in tree.values() if not t.info.zombie]
    return Verification(True, "", processes=children_first(live))
