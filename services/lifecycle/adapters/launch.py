"""One EnsureSession spawn, step by step (SPEC §13).

The lease is durable before the wrapper exists (pending), then learns its
tree in two compare-and-set writes: the wrapper's PID and birth identity once
it runs, the adapter's PID and process group once the wrapper reports the
adapter's start. A close does not take EnsureSession's per-key lock, so it can
end the lease at any point in between; each write therefore lands only while
the lease is still open, and a tree whose lease ended meanwhile is stopped
before the spawn fails with :class:`~services.lifecycle.requests.Unavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from services.common.logs import get_logger
from services.lifecycle.adapters.control_channel import AdoptPolicy, WrapperLink
from services.lifecycle.adapters.spawn import (
    AdoptFds,
    SpawnSpec,
    WrapperPaths,
    spawn_wrapper,
    stderr_log_path,
    wrapper_argv,
)
from services.lifecycle.attach.channel import START_TIMEOUT_SECS, AdapterChannel, SpawnFailed
from services.lifecycle.leases.store import HELD_STATES, LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import ProcessTable, ProcessTableError
from services.lifecycle.processes.verify import command_hash
from services.lifecycle.reaping.reaper import Reaper, now_ms
from services.lifecycle.requests import EnsureRequest, Unavailable

#: The controller's logger: a spawn is part of the controller's story in the logs.
log = get_logger("lifecycle.controller")

#: Reads of a just-spawned wrapper's birth identity before the spawn is given up.
BIRTH_READ_ATTEMPTS = 5
BIRTH_READ_RETRY_SECS = 0.05


class CloseLease(Protocol):
    """Close a lease through the verified reap, as a ``CloseSession`` would."""

    def __call__(self, *, lease_id: str, reason: str) -> Awaitable[object]: ...


@dataclass(frozen=True)
class LaunchContext:
    """What a launch uses of the controller that runs it, and nothing more.

    ``spawning`` and ``channels`` are the controller's own collections, shared: a launch
    adds its lease id to the first while it runs, and its channel to the second.
    """

    store: LeaseStore
    table: ProcessTable
    reaper: Reaper
    term_grace_ms: int
    #: Lease ids of the spawns in flight: an orphan reap leaves their pending leases alone.
    spawning: set[str]
    #: The live channels by lease id.
    channels: dict[str, AdapterChannel]
    #: The wrappers' adoption window (None: none); a wrapper spawned under it gets a link.
    adoption: AdoptPolicy | None
    #: The close a spawn whose adapter never started goes through.
    close_session: CloseLease


@dataclass(frozen=True)
class LaunchPlan:
    """What a spawn will run, decided before anything runs."""

    spec: SpawnSpec
    #: The wrapper's exact argv; its hash is the lease's command hash.
    argv: list[str]
    #: The pending lease: no root, group or adapter yet.
    lease: LeaseRecord
    #: The report pipe: the wrapper writes the adapter's start on ``report_w``.
    report_r: int
    report_w: int
    #: With an adoption window: the pipes and key pipe the argv names.
    adopt: AdoptFds | None = None

    def close_fds(self) -> None:
        """Close every descriptor of the plan (a spawn that never happened)."""
        os.close(self.report_r)
        os.close(self.report_w)
        if self.adopt is not None:
            self.adopt.close()


def plan_launch(
    req: EnsureRequest,
    *,
    instance_id: str,
    wrapper: WrapperPaths,
    state_dir: Path,
    term_grace_ms: int,
    state: LeaseState = LeaseState.OPEN,
    adoption: AdoptPolicy | None = None,
) -> LaunchPlan:
    """A new lease id, the wrapper's spec and argv, its report pipe and the pending lease.

    ``state`` is the lease's state from the start: open for a session, warm for
    a warm pool. The pipe is opened here because its write end is named in the
    argv, whose hash the lease records; :meth:`Launch.run` closes both ends on
    every path.
    """
    lease_id = str(uuid.uuid4())
    spec = SpawnSpec(
        lease_id=lease_id,
        instance_id=instance_id,
        command=req.command,
        args=tuple(req.args),
        env=dict(req.env),
        pass_env=tuple(req.pass_env),
        cwd=req.cwd,
        term_grace_ms=term_grace_ms,
        stderr_log=stderr_log_path(state_dir, lease_id),
    )
    control = adoption.path(lease_id) if adoption is not None and adoption.enabled else None
    adopt: AdoptFds | None = None
    if adoption is not None and control is not None:
        spec = replace(spec, adopt_secs=adoption.secs, control_path=control)
        adopt = AdoptFds.open(adoption.key(lease_id))
    try:
        report_r, report_w = os.pipe()
    except BaseException:
        if adopt is not None:
            adopt.close()
        raise
    argv = wrapper_argv(wrapper, spec, parent_pid=os.getpid(), report_fd=report_w, adopt=adopt)
    lease = LeaseRecord(
        lease_id=lease_id,
        gateway_instance_id=instance_id,
        session_key=req.session_key,
        wrapper_root=str(wrapper.root),
        wrapper_path=str(wrapper.path),
        command_hash=command_hash(argv),
        started_at=now_ms(),
        state=state,
    )
    return LaunchPlan(spec, argv, lease, report_r, report_w, adopt)


class Launch:
    """Runs one :class:`LaunchPlan` in a controller's :class:`LaunchContext`."""

    def __init__(self, context: LaunchContext, plan: LaunchPlan) -> None:
        self.context = context
        self.plan = plan

    async def run(self) -> tuple[LeaseRecord, AdapterChannel]:
        """The spawn, step by step: the lease as completed, and the adapter's channel.

        While it runs the lease id is in the context's ``spawning`` set, so an
        orphan reap never takes the pending lease for an earlier run's leftover.
        """
        spawning = self.context.spawning
        lease_id = self.plan.lease.lease_id
        spawning.add(lease_id)
        try:
            await self.insert_pending()
            channel = await self.start_wrapper()
            lease = await self.record_root(channel)
            lease = await self.record_adapter(channel, lease)
        finally:
            spawning.discard(lease_id)
        return lease, channel

    async def insert_pending(self) -> None:
        """Step 1: the pending lease, durable before the wrapper exists."""
        plan = self.plan
        try:
            await self.context.store.insert(plan.lease)
        except BaseException:
            plan.close_fds()
            raise

    async def start_wrapper(self) -> AdapterChannel:
        """Step 2: start the wrapper; its channel, registered in the context.

        A wrapper that cannot be started at all ends its lease as lost.
        """
        plan, context = self.plan, self.context
        try:
            spawned = await spawn_wrapper(plan.argv, plan.spec, plan.report_r, plan.report_w,
                                          plan.adopt)
        except OSError as exc:
            await context.store.transition(plan.lease, LeaseState.LOST, now_ms=now_ms())
            raise Unavailable(f"cannot start the wrapper: {exc}") from None
        lease_id = plan.lease.lease_id
        channel = AdapterChannel(lease_id, spawned.process, spawned.report, plan.spec.stderr_log,
                                 stdin_fd=spawned.stdin, stdout_fd=spawned.stdout,
                                 control=WrapperLink.of(context.adoption, lease_id,
                                                        spawned.process.pid))
        context.channels[lease_id] = channel
        return channel

    async def record_root(self, channel: AdapterChannel) -> LeaseRecord:
        """Step 3: the wrapper's PID and birth identity onto the lease (if still open).

        A wrapper whose birth identity cannot be read is stopped and the spawn fails.
        """
        lease = self.plan.lease
        process = channel.process
        try:
            root_start = await self.read_birth(process.pid)
        except ProcessTableError as exc:
            await self.abandon_unidentified(channel, lease, str(exc))
            raise Unavailable(f"cannot start adapter: {exc}") from None
        return await self.complete(
            channel, replace(lease, root_pid=process.pid, root_start_time=root_start)
        )

    async def record_adapter(self, channel: AdapterChannel, lease: LeaseRecord) -> LeaseRecord:
        """Step 4: wait for the wrapper's report; the adapter and its group onto the lease.

        An adapter that fails to start (or is not reported in time) is closed
        through the verified reap path and the spawn fails.
        """
        context = self.context
        try:
            started = await asyncio.wait_for(asyncio.shield(channel.started), START_TIMEOUT_SECS)
        except (SpawnFailed, TimeoutError) as exc:
            reason = str(exc) or "the wrapper did not report the adapter's start"
            await context.close_session(lease_id=lease.lease_id, reason="spawn-failed")
            context.channels.pop(lease.lease_id, None)
            await channel.aclose()
            raise Unavailable(f"cannot start adapter: {reason}") from None
        return await self.complete(
            channel,
            replace(lease, process_group_id=started.pgid, adapter_pid=started.adapter_pid),
        )

    async def read_birth(self, pid: int) -> int:
        """The birth identity (start time) of the just-spawned wrapper ``pid``.

        Retried briefly: a transient read failure must not become a stored 0,
        which every later verification would take for a reused PID (the lease
        would end lost with its wrapper never signalled). Raises
        :class:`ProcessTableError` when it still cannot be read.
        """
        table = self.context.table
        why = ""
        for attempt in range(BIRTH_READ_ATTEMPTS):
            if attempt:
                await asyncio.sleep(BIRTH_READ_RETRY_SECS)
            try:
                info = await table.get(pid)
            except ProcessTableError as exc:
                why = str(exc)
                continue
            if info is not None and info.start_time > 0:
                return info.start_time
            why = "not in the process table"
        raise ProcessTableError(f"cannot read the wrapper's birth identity (pid {pid}): {why}")

    async def abandon_unidentified(
        self, channel: AdapterChannel, lease: LeaseRecord, why: str
    ) -> None:
        """Stop a wrapper whose birth identity could not be read, and end its lease.

        Without the identity no later verification can prove the tree is ours,
        so it must not outlive the spawn. We still hold its asyncio handle and
        have not reaped it, so its PID cannot have been reused: signalling it
        through the handle is safe. SIGTERM lets the wrapper stop its adapter
        group itself; SIGKILL only if it does not exit in time.
        """
        store = self.context.store
        process = channel.process
        log.warning("wrapper_birth_unreadable", lease_id=lease.lease_id, why=why)
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), self.context.term_grace_ms / 1000 + 2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 2.0)
        async with store.lock(lease.lease_id):
            current = await store.get(lease.lease_id)
            if current is not None and current.state in HELD_STATES:
                await store.transition(current, LeaseState.CLOSED, now_ms=now_ms())
        await self.retire_channel(channel)

    async def complete(self, channel: AdapterChannel, lease: LeaseRecord) -> LeaseRecord:
        """Store what the spawn learnt about its tree, only while the lease is still open
        (or, for a warm pool's spawn, warm).

        A close (by lease id or session key) does not take the key lock, so it can
        end the lease while the spawn is in flight, e.g. as lost before the wrapper
        existed. Writing the tree onto such a lease would leave an adapter nobody
        can close. The write is a compare-and-set under the lease's lock (so no
        close runs meanwhile); when it fails, the just-spawned tree is stopped
        through the verified reap path and the spawn fails with Unavailable.
        """
        store = self.context.store
        changes: dict[str, Any] = {
            "root_pid": lease.root_pid,
            "root_start_time": lease.root_start_time,
            "process_group_id": lease.process_group_id,
            "adapter_pid": lease.adapter_pid,
        }
        async with store.lock(lease.lease_id):
            completed = await store.update(
                lease.lease_id, expect=[self.plan.lease.state], **changes)
            if completed is not None:
                return completed
            result = await self.context.reaper.stop_stray(lease, reason="closed-during-spawn")
        process = channel.process
        if result.unverified_reason and process.returncode is None:
            # Unverifiable now, but the wrapper is our unreaped child (its PID
            # cannot be reused): SIGTERM makes it stop its adapter group itself.
            log.warning(
                "stray_wrapper_terminated_by_handle",
                lease_id=lease.lease_id,
                why=result.unverified_reason,
            )
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        log.warning(
            "lease_closed_during_spawn",
            lease_id=lease.lease_id,
            terminated=list(result.terminated_pids),
            surviving=list(result.surviving_pids),
        )
        await self.retire_channel(channel)
        raise Unavailable("cannot start adapter: the session was closed while it was starting")

    async def retire_channel(self, channel: AdapterChannel) -> None:
        """Forget a channel whose processes were stopped; let its exit land, stop reading."""
        context = self.context
        context.channels.pop(channel.lease_id, None)
        try:
            await asyncio.wait_for(channel.finished.wait(), context.term_grace_ms / 1000 + 3.0)
        except TimeoutError:
            log.warning("channel_not_finished_after_close", lease_id=channel.lease_id)
        await channel.aclose()
