"""The named steps of VerifyOwnedTree, one contract each (SPEC §13).

test_simulator.py runs whole closes and reaps through these steps; here each
step is held to its own promise: what it accepts, and which fail-closed
verdict it refuses with.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.lifecycle.processes.snapshot import ProcSnapshot, descendants
from services.lifecycle.processes.table import FakeProc, FakeProcessTable
from services.lifecycle.processes.verify import (
    REASON_AMBIGUOUS,
    REASON_BIRTH,
    REASON_COMMAND,
    REASON_ENV,
    REASON_EXECUTABLE,
    REASON_EXITING,
    REASON_LISTING,
    REASON_NOT_WRAPPER,
    REASON_OTHER_INSTANCE,
    REASON_PENDING_GONE,
    REASON_PGID,
    REASON_ROOT_GONE,
    REASON_UNREADABLE,
    REASON_WRAPPER_ROOT,
    Owner,
    Refused,
    adapter_anchors_group,
    check_owner,
    check_root_command,
    check_root_environment,
    check_root_runs_wrapper,
    join_group,
    list_snapshot,
    locate_root,
)
from tests.lifecycle.test_simulator import (
    ADAPTER_PID,
    GRANDCHILD_PID,
    INSTANCE,
    OTHER_INSTANCE,
    OTHER_ROOT,
    PY,
    ROOT,
    T_WRAPPER,
    WRAPPER,
    WRAPPER_PID,
    adapter_proc,
    full_tree,
    grandchild_proc,
    make_lease,
    marks,
    wrapper_argv,
    wrapper_proc,
)

OWNER = Owner(INSTANCE, ROOT)


def snap_of(procs: list[FakeProc]) -> ProcSnapshot:
    return ProcSnapshot([p.info() for p in procs])


# ---------------------------------------------------------------------- check_owner


def test_check_owner_accepts_this_gateways_lease_under_a_lexically_equal_root() -> None:
    check_owner(make_lease(wrapper_root=ROOT + "/"), OWNER)  # no refusal


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"gateway_instance_id": OTHER_INSTANCE}, REASON_OTHER_INSTANCE),
        ({"wrapper_root": OTHER_ROOT, "wrapper_path": f"{OTHER_ROOT}/acpgate_wrapper.py"},
         REASON_WRAPPER_ROOT),
        ({"wrapper_path": "/tmp/acpgate_wrapper.py"}, REASON_WRAPPER_ROOT),
        ({"wrapper_path": ROOT}, REASON_WRAPPER_ROOT),  # the root itself is not inside it
    ],
)
def test_check_owner_refuses_what_is_not_ours(changes: dict[str, object], reason: str) -> None:
    with pytest.raises(Refused) as refused:
        check_owner(make_lease(**changes), OWNER)  # type: ignore[arg-type]
    assert refused.value.verdict.reason == reason
    assert not refused.value.verdict.verified
    assert not refused.value.verdict.root_gone  # never a reason to end the lease as lost


# ---------------------------------------------------------------------- list_snapshot


async def test_list_snapshot_refuses_as_evidence_unavailable_when_the_table_cannot_answer() -> None:
    table = FakeProcessTable(full_tree())
    assert set((await list_snapshot(table)).by_pid) == {WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID}
    table.listing_available = False
    with pytest.raises(Refused) as refused:
        await list_snapshot(table)
    verdict = refused.value.verdict
    assert verdict.evidence_unavailable and verdict.reason.startswith(REASON_LISTING)


# ---------------------------------------------------------------------- locate_root


def test_locate_root_finds_the_recorded_root_and_tells_a_reused_pid_from_a_gone_one() -> None:
    located = locate_root(make_lease(), snap_of(full_tree()), INSTANCE)
    assert located.live_root() is not None and located.live_root().pid == WRAPPER_PID  # type: ignore[union-attr]
    assert located.recovered is None

    reused = locate_root(make_lease(), snap_of([wrapper_proc(start_time=T_WRAPPER + 1)]), INSTANCE)
    assert reused.live_root() is None and reused.gone_reason == REASON_BIRTH

    absent = locate_root(make_lease(), snap_of([adapter_proc()]), INSTANCE)
    assert absent.live_root() is None and absent.gone_reason == REASON_ROOT_GONE


def test_locate_root_counts_a_zombie_root_as_gone() -> None:
    zombie = replace(wrapper_proc().info(), zombie=True)
    located = locate_root(make_lease(), ProcSnapshot([zombie]), INSTANCE)
    assert located.live_root() is None and located.gone_reason == REASON_ROOT_GONE


def test_locate_root_refuses_an_unreadable_root_instead_of_calling_it_gone() -> None:
    with pytest.raises(Refused) as refused:
        locate_root(make_lease(), snap_of([wrapper_proc(unreadable=True)]), INSTANCE)
    verdict = refused.value.verdict
    assert verdict.reason == REASON_UNREADABLE
    assert verdict.evidence_unavailable and not verdict.root_gone


def test_locate_root_recovers_a_pending_lease_from_exactly_one_wrapper() -> None:
    pending = make_lease(root_pid=0, root_start_time=0, process_group_id=None, adapter_pid=0)
    other_lease = wrapper_proc(pid=5000, cmdline=wrapper_argv(lease_id="lease-2"))
    located = locate_root(pending, snap_of([wrapper_proc(), other_lease]), INSTANCE)
    assert located.recovered is not None and located.recovered.pid == WRAPPER_PID
    assert located.live_root() == located.recovered


@pytest.mark.parametrize(
    ("procs", "reason", "root_gone"),
    [
        ([wrapper_proc(), wrapper_proc(pid=5000)], REASON_AMBIGUOUS, False),
        ([wrapper_proc(cmdline=wrapper_argv(instance=OTHER_INSTANCE))], REASON_PENDING_GONE, True),
        ([], REASON_PENDING_GONE, True),
    ],
)
def test_locate_root_refuses_a_pending_lease_without_one_exact_wrapper(
    procs: list[FakeProc], reason: str, root_gone: bool
) -> None:
    pending = make_lease(root_pid=0, root_start_time=0, process_group_id=None, adapter_pid=0)
    with pytest.raises(Refused) as refused:
        locate_root(pending, snap_of(procs), INSTANCE)
    assert refused.value.verdict.reason == reason
    assert refused.value.verdict.root_gone is root_gone


# ---------------------------------------------------------------------- the root's identity


def test_check_root_command_accepts_the_exact_wrapper_argv() -> None:
    check_root_command(make_lease(), wrapper_proc().info(), None)


@pytest.mark.parametrize(
    ("cmdline", "reason", "unavailable"),
    [
        ((), REASON_EXITING, True),
        (("/usr/bin/python3", "/opt/elsewhere.py"), REASON_WRAPPER_ROOT, False),
        ((*wrapper_argv(), "--extra"), REASON_COMMAND, False),
    ],
)
def test_check_root_command_refuses_and_keeps_the_recovered_root(
    cmdline: tuple[str, ...], reason: str, unavailable: bool
) -> None:
    root = wrapper_proc(cmdline=cmdline).info()
    with pytest.raises(Refused) as refused:
        check_root_command(make_lease(), root, root)
    verdict = refused.value.verdict
    assert verdict.reason == reason
    assert verdict.evidence_unavailable is unavailable
    assert verdict.recovered_root == root  # a pending lease still learns its root


async def test_check_root_runs_wrapper_accepts_the_interpreter_running_the_wrapper_file() -> None:
    table = FakeProcessTable([wrapper_proc()])
    await check_root_runs_wrapper(make_lease(), wrapper_proc().info(), table, None)


@pytest.mark.parametrize(
    ("changes", "reason", "unavailable"),
    [
        # `exec -a <wrapper path> sleep 1000`: the wrapper path is argv[0], not the script run.
        ({"cmdline": (WRAPPER, "1000"), "exe": "/usr/bin/sleep"}, REASON_NOT_WRAPPER, False),
        # `python -c <code> -I -S <wrapper path>`: the interpreter does not run the file.
        ({"cmdline": (PY, "-c", "pass", "-I", "-S", WRAPPER)}, REASON_NOT_WRAPPER, False),
        # The exact argv, but argv[0] names another binary than the one running.
        ({"exe": "/tmp/python-copy"}, REASON_EXECUTABLE, False),
        ({"exe": ""}, REASON_EXITING, True),
    ],
)
async def test_check_root_runs_wrapper_refuses_what_only_looks_like_it(
    changes: dict[str, object], reason: str, unavailable: bool
) -> None:
    proc = wrapper_proc(**changes)
    table = FakeProcessTable([proc])
    with pytest.raises(Refused) as refused:
        await check_root_runs_wrapper(make_lease(), proc.info(), table, proc.info())
    verdict = refused.value.verdict
    assert verdict.reason == reason
    assert verdict.evidence_unavailable is unavailable
    assert verdict.recovered_root == proc.info()


async def test_check_root_environment_needs_the_marks_only_where_readable() -> None:
    lease = make_lease()
    for environ in (marks(), None):  # None: unreadable, proves nothing either way
        table = FakeProcessTable([wrapper_proc(environ=environ)])
        await check_root_environment(lease, wrapper_proc().info(), table, INSTANCE, None)
    table = FakeProcessTable([wrapper_proc(environ=marks(lease_id="lease-2"))])
    with pytest.raises(Refused) as refused:
        await check_root_environment(lease, wrapper_proc().info(), table, INSTANCE, None)
    assert refused.value.verdict.reason == REASON_ENV


# ---------------------------------------------------------------------- the group


def test_adapter_anchors_group_only_while_it_is_the_roots_child() -> None:
    root = wrapper_proc().info()
    assert adapter_anchors_group(make_lease(), root, snap_of(full_tree()), None) is True
    reparented = [wrapper_proc(), adapter_proc(ppid=1), grandchild_proc()]
    assert adapter_anchors_group(make_lease(), root, snap_of(reparented), None) is False
    # A reparented adapter in another group is not evidence against the lease either.
    moved = [wrapper_proc(), adapter_proc(ppid=1, pgid=9999)]
    assert adapter_anchors_group(make_lease(), root, snap_of(moved), None) is False


def test_adapter_anchors_group_refuses_an_anchored_adapter_leading_another_group() -> None:
    procs = [wrapper_proc(), adapter_proc(pgid=9999)]
    with pytest.raises(Refused) as refused:
        adapter_anchors_group(make_lease(), wrapper_proc().info(), snap_of(procs), None)
    assert refused.value.verdict.reason == REASON_PGID


async def test_join_group_takes_members_outside_the_parent_links_by_anchor_or_marks() -> None:
    # The grandchild was reparented away from the tree but stays in the adapter's group.
    stray = grandchild_proc(ppid=1, environ={})
    old = FakeProc(4200, 1, ADAPTER_PID, T_WRAPPER - 1, ("old",), environ=marks())
    procs = [wrapper_proc(), adapter_proc(), stray, old]
    snap, root = snap_of(procs), wrapper_proc().info()
    table = FakeProcessTable(procs)

    tree = descendants(root, snap)
    notes = await join_group(tree, make_lease(), root, snap, table, INSTANCE, anchored=True)
    assert set(tree) == {WRAPPER_PID, ADAPTER_PID, GRANDCHILD_PID}  # anchored: joins unmarked
    assert notes == ["pid 4200 in the group but older than the wrapper: skipped"]

    tree = descendants(root, snap)
    notes = await join_group(tree, make_lease(), root, snap, table, INSTANCE, anchored=False)
    assert GRANDCHILD_PID not in tree  # not anchored and no marks: left alone
    assert f"pid {GRANDCHILD_PID} in the group without lease evidence: skipped" in notes

    table.procs[GRANDCHILD_PID].environ = marks()
    tree = descendants(root, snap)
    await join_group(tree, make_lease(), root, snap, table, INSTANCE, anchored=False)
    assert tree[GRANDCHILD_PID].depth == 2 and 4200 not in tree


async def test_join_group_ignores_the_init_group_and_leases_without_a_group() -> None:
    procs = [wrapper_proc(), FakeProc(4300, 1, 1, T_WRAPPER + 5, ("x",), environ=marks())]
    snap, root = snap_of(procs), wrapper_proc().info()
    for pgid in (None, 1):
        tree = descendants(root, snap)
        lease = make_lease(process_group_id=pgid)
        notes = await join_group(tree, lease, root, snap, FakeProcessTable(procs), INSTANCE, True)
        assert set(tree) == {WRAPPER_PID} and notes == []


def test_descendants_skips_a_child_older_than_its_parent() -> None:
    # A "child" born before its parent is a reused PID link, never part of the tree.
    procs = [wrapper_proc(), adapter_proc(start_time=T_WRAPPER - 1), grandchild_proc()]
    tree = descendants(wrapper_proc().info(), snap_of(procs))
    assert set(tree) == {WRAPPER_PID} and tree[WRAPPER_PID].depth == 0
