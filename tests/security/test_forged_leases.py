"""Forged leases are never signalled ("make sure of what held"; SPEC §13).

A lease row can name any process, with the right PID and birth time and a
command hash made to match its argv: the row proves nothing on its own. Each
stranger here is dressed as a lease's process (the lease markers in its
environment, ``exec -a <wrapper path>``, the exact wrapper argv under a copied
interpreter, a decoy for a pending lease, another user's process carrying the
markers) and its row is planted in a real lifecycle service's store. Startup
reaping, CloseSession, ReapOrphans and VerifyOwnedTree then all run: no
stranger ever gets a signal (each records every catchable one; SIGKILL would
show as its death). One same-user marked process of a dead wrapper is the
contrast that proves the reap does look.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2 as pb
from acpgate_contracts.lifecycle.v1 import lifecycle_pb2_grpc
from services.lifecycle.adapters.spawn import WrapperPaths, install_wrapper
from services.lifecycle.api.server import start_lifecycle_server
from services.lifecycle.leases.instance import load_or_create_instance_id
from services.lifecycle.leases.store import LeaseRecord, LeaseStore
from services.lifecycle.processes.table import PsutilProcessTable
from services.lifecycle.processes.verify import (
    INSTANCE_ENV,
    LEASE_ENV,
    REASON_EXECUTABLE,
    REASON_NOT_WRAPPER,
    command_hash,
)
from tests.lifecycle.conftest import UNRELATED, ProcessGuard, make_config
from tests.security.procs import alive, eventually, guard

__all__ = ["guard"]  # the shared fixture: imported so that pytest finds it here

pytestmark = pytest.mark.slow

NOBODY = 65534


@dataclass
class Stranger:
    """A process dressed as a lease's, and the marker file its signal handler writes."""

    proc: psutil.Process
    marker: Path

    def signals(self) -> str:
        """Every catchable signal it received, one per line ("" when none)."""
        return self.marker.read_text() if self.marker.exists() else ""


def marked_env(lease_id: str, instance_id: str) -> dict[str, str]:
    """Our environment plus the lease markers, as a wrapper's children carry them."""
    return {**os.environ, LEASE_ENV: lease_id, INSTANCE_ENV: instance_id}


async def spawn(argv: list[str], *, env: dict[str, str], guard: ProcessGuard,
                **popen: object) -> psutil.Process:
    """Start ``argv`` (stdin closed) and track it for cleanup."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdin=asyncio.subprocess.DEVNULL, **popen)  # type: ignore[arg-type]
    return guard.track(proc.pid)


async def start(argv: list[str], *, env: dict[str, str], guard: ProcessGuard,
                marker: Path) -> Stranger:
    """Start a stranger running :data:`UNRELATED` (directly or under a disguise)."""
    stranger = Stranger(await spawn(argv, env=env, guard=guard), marker)
    await eventually(lambda: Path(f"{marker}.ready").exists(), 10.0, f"{argv[0]} ready")
    return stranger


async def row_for(lease_id: str, instance_id: str, wrapper: WrapperPaths, proc: psutil.Process,
                  **changes: object) -> LeaseRecord:
    """A lease naming ``proc`` exactly (PID, birth, group), its hash made from its live argv."""
    info = await PsutilProcessTable().get(proc.pid)
    assert info is not None
    fields: dict[str, object] = {
        "lease_id": lease_id, "gateway_instance_id": instance_id,
        "session_key": f"agent:forged:acp:{lease_id}", "wrapper_root": str(wrapper.root),
        "wrapper_path": str(wrapper.path), "command_hash": command_hash(info.cmdline),
        "started_at": 1, "root_pid": info.pid, "root_start_time": info.start_time,
        "process_group_id": info.pgid, "adapter_pid": info.pid,
    }
    fields.update(changes)
    return LeaseRecord(**fields)  # type: ignore[arg-type]


async def test_forged_leases_are_never_signalled(tmp_path: Path, guard: ProcessGuard) -> None:
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    state_dir = cfg.lifecycle_state_dir
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    unrelated = tmp_path / "unrelated.py"
    unrelated.write_text(UNRELATED, encoding="utf-8")
    rows: list[LeaseRecord] = []

    # 1. `exec -a <wrapper path>`: argv[0] is the wrapper path, the hash is of that argv.
    alias = await start(
        ["bash", "-c", f'exec -a "{wrapper.path}" "{sys.executable}" "{unrelated}" "$0"',
         str(tmp_path / "alias")],
        env=marked_env("forged-alias", instance_id), guard=guard, marker=tmp_path / "alias")
    assert alias.proc.cmdline()[0] == str(wrapper.path)
    rows.append(await row_for("forged-alias", instance_id, wrapper, alias.proc))

    # 2. The exact argv of a wrapper, running the wrapper file itself, but under a copy
    #    of the interpreter that argv[0] names: only the kernel's executable tells.
    copy = tmp_path / "python-copy"
    await asyncio.to_thread(shutil.copy, sys.executable, copy)  # the binary, not the link
    argv = [sys.executable, "-I", "-S", str(wrapper.path), "--lease-id", "forged-copy",
            "--instance-id", instance_id, "--parent-pid", str(os.getpid()), "--",
            sys.executable, str(unrelated), str(tmp_path / "copied")]
    copied_root = await spawn(argv, executable=copy, env=marked_env("forged-copy", instance_id),
                              guard=guard)
    await eventually(lambda: Path(f"{tmp_path / 'copied'}.ready").exists(), 10.0, "copied wrapper's adapter")
    (copied_adapter,) = copied_root.children()
    copied = Stranger(guard.track(copied_adapter.pid), tmp_path / "copied")
    assert copied_root.cmdline() == argv
    rows.append(await row_for("forged-copy", instance_id, wrapper, copied_root,
                              process_group_id=copied_adapter.pid, adapter_pid=copied_adapter.pid))

    # 3. A decoy for a pending lease (no root recorded): its argv names the wrapper
    #    path, the lease id and the instance id, as the recovery looks for.
    decoy = await start(
        ["bash", "-c", f'exec -a "{wrapper.path}" "{sys.executable}" "{unrelated}" "$0"'
         f' --lease-id forged-pending --instance-id {instance_id}', str(tmp_path / "decoy")],
        env=marked_env("forged-pending", instance_id), guard=guard, marker=tmp_path / "decoy")
    pending = await row_for("forged-pending", instance_id, wrapper, decoy.proc, root_pid=0,
                            root_start_time=0, process_group_id=None, adapter_pid=0,
                            command_hash=command_hash(decoy.proc.cmdline()))
    rows.append(pending)

    store = await LeaseStore.open(state_dir / "leases.db")
    try:
        for row in rows:
            await store.insert(row)
    finally:
        await store.close()

    strangers = [alias, copied, decoy]
    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")  # startup reap runs here
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        verdicts = {}
        for row in rows:
            v = await stub.VerifyOwnedTree(pb.VerifyOwnedTreeRequest(lease_id=row.lease_id))
            assert not v.verified and list(v.processes) == []
            verdicts[row.lease_id] = v.reason
            closed = await stub.CloseSession(pb.CloseSessionRequest(lease_id=row.lease_id))
            assert list(closed.terminated_pids) == [] and list(closed.surviving_pids) == []
            # The process is alive and unproven: the lease waits, open, for a retry.
            assert closed.lease.state == pb.LEASE_STATE_OPEN
        assert verdicts["forged-alias"] == REASON_NOT_WRAPPER
        assert verdicts["forged-copy"] == REASON_EXECUTABLE
        assert verdicts["forged-pending"] == REASON_NOT_WRAPPER
        reaped = await stub.ReapOrphans(pb.ReapOrphansRequest())
        assert all(list(r.terminated_pids) == [] for r in reaped.results)
    finally:
        await channel.close(None)
        await server.stop()
    await asyncio.sleep(0.3)  # a signal in flight would have landed by now
    for stranger in strangers:
        assert alive(stranger.proc), f"{stranger.marker.name} was killed"
        assert stranger.signals() == "", f"{stranger.marker.name} got signals {stranger.signals()!r}"
    assert alive(copied_root)


@pytest.mark.skipif(os.getuid() != 0, reason="starting another user's process needs root")
async def test_another_users_process_carrying_a_dead_wrappers_marks_is_never_signalled(
    tmp_path: Path, guard: ProcessGuard
) -> None:
    """A set-uid program or another user's process started with our markers is not ours.

    The lease is genuine-looking and its wrapper gone, so the reap searches the
    environment of every process; the other user's marked process must stay, and
    the same-user one (the contrast) must go.
    """
    cfg = make_config(tmp_path / "gw", term_grace_ms=200)
    state_dir = cfg.lifecycle_state_dir
    instance_id = await load_or_create_instance_id(state_dir)
    wrapper = await install_wrapper(state_dir)
    # A wrapper birth in the past: a process that ran and is gone (its PID may be reused).
    gone_root = await asyncio.create_subprocess_exec("sleep", "30")
    info = await PsutilProcessTable().get(gone_root.pid)
    assert info is not None
    gone_root.kill()
    await gone_root.wait()
    argv = [sys.executable, "-I", "-S", str(wrapper.path), "--lease-id", "dead-wrapper", "--", "agent"]
    row = LeaseRecord(
        lease_id="dead-wrapper", gateway_instance_id=instance_id, session_key="agent:x:acp:dead",
        wrapper_root=str(wrapper.root), wrapper_path=str(wrapper.path), command_hash=command_hash(argv),
        started_at=1, root_pid=info.pid, root_start_time=info.start_time,
        process_group_id=info.pid, adapter_pid=info.pid,
    )
    env = marked_env("dead-wrapper", instance_id)
    other_user = await spawn(["sleep", "1000"], env=env, guard=guard, user=NOBODY, start_new_session=True)
    ours = await asyncio.create_subprocess_exec("sleep", "1000", env=env, start_new_session=True)
    same_user = guard.track(ours.pid)
    store = await LeaseStore.open(state_dir / "leases.db")
    try:
        await store.insert(row)
    finally:
        await store.close()

    server = await start_lifecycle_server(cfg, f"unix:{tmp_path}/l.sock")  # startup reap runs here
    channel = server.dial()
    stub = lifecycle_pb2_grpc.LifecycleServiceStub(channel)
    try:
        await eventually(lambda: not alive(same_user), 5.0, "the same-user marked process to be reaped")
        leases = await stub.ListLeases(pb.ListLeasesRequest())
        (stored,) = [x for x in leases.leases if x.lease_id == "dead-wrapper"]
        assert stored.state == pb.LEASE_STATE_LOST
    finally:
        await channel.close(None)
        await server.stop()
    assert alive(other_user), "another user's process was signalled"
    await ours.wait()
