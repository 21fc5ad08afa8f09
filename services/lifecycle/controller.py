"""The lifecycle controller: leases, spawns, channels and reaping for one gateway.

The gRPC servicer is a thin translation layer over this class; tests and the
embedded mode can use it directly. One controller per lifecycle state dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from services.common.logs import get_logger
from services.lifecycle.attach import START_TIMEOUT_SECS, AdapterChannel, SpawnFailed
from services.lifecycle.leases import LIVE_STATES, LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.proctable import ProcessTable, ProcessTableError
from services.lifecycle.reaper import CloseResult, Reaper, now_ms
from services.lifecycle.spawn import (
    SpawnSpec,
    WrapperPaths,
    spawn_wrapper,
    stderr_log_path,
    wrapper_argv,
)
from services.lifecycle.verify import Owner, Verification, command_hash

log = get_logger("lifecycle.controller")

#: Reads of a just-spawned wrapper's birth identity before the spawn is given up.
BIRTH_READ_ATTEMPTS = 5
BIRTH_READ_RETRY_SECS = 0.05


class LeaseNotFound(Exception):
    """No such lease (or no open lease for the session key)."""


class InvalidRequest(Exception):
    """The request is malformed; the message says how."""


class Unavailable(Exception):
    """The adapter could not be started."""


@dataclass(frozen=True)
class EnsureRequest:
    """Spawn request for a session key."""

    session_key: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""


@dataclass(frozen=True)
class InstanceInfo:
    """This gateway's identity."""

    gateway_instance_id: str
    state_dir: str
    wrapper_root: str
    started_at: int


class LifecycleController:
    """Owns the lease store, the live channels and the reaper of one gateway."""

    def __init__(
        self,
        *,
        store: LeaseStore,
        table: ProcessTable,
        instance_id: str,
        state_dir: Path,
        wrapper: WrapperPaths,
        term_grace_ms: int,
        retention_secs: int,
    ) -> None:
        self.store = store
        self.table = table
        self.instance_id = instance_id
        self.state_dir = state_dir
        self.wrapper = wrapper
        self.term_grace_ms = term_grace_ms
        self.retention_secs = retention_secs
        self.owner = Owner(instance_id=instance_id, wrapper_root=str(wrapper.root))
        self.reaper = Reaper(store, table, self.owner, term_grace_ms=term_grace_ms)
        self.started_at = now_ms()
        self.channels: dict[str, AdapterChannel] = {}
        self._spawning: set[str] = set()
        self._key_locks: dict[str, asyncio.Lock] = {}
        self._exit_tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ identity

    def instance(self) -> InstanceInfo:
        """GetInstance."""
        return InstanceInfo(
            self.instance_id, str(self.state_dir), str(self.wrapper.root), self.started_at
        )

    # ------------------------------------------------------------------ ensure

    def _key_lock(self, key: str) -> asyncio.Lock:
        lock = self._key_locks.get(key)
        if lock is None:
            lock = self._key_locks[key] = asyncio.Lock()
        return lock

    async def ensure_session(self, req: EnsureRequest) -> tuple[LeaseRecord, bool]:
        """The live open lease of ``req.session_key``, or a new spawn: ``(lease, spawned)``."""
        if not req.session_key:
            raise InvalidRequest("session_key is required")
        if not req.command:
            raise InvalidRequest("command is required")
        if "\0" in req.command or any("\0" in a for a in req.args):
            raise InvalidRequest("command and args must not contain NUL")
        if req.cwd and not await asyncio.to_thread(os.path.isdir, req.cwd):
            raise InvalidRequest(f"cwd is not a directory: {req.cwd}")
        async with self._key_lock(req.session_key):
            existing = await self.store.list(
                states=LIVE_STATES, session_key=req.session_key, instance_id=self.instance_id
            )
            for lease in existing:
                channel = self.channels.get(lease.lease_id)
                if channel is not None and channel.running and lease.state == LeaseState.OPEN:
                    return lease, False
            for lease in existing:
                # Its adapter died or it belongs to an earlier run: settle it first.
                await self.close_session(lease_id=lease.lease_id, reason="replaced")
            return await self._spawn(req), True

    async def _spawn(self, req: EnsureRequest) -> LeaseRecord:
        lease_id = str(uuid.uuid4())
        spec = SpawnSpec(
            lease_id=lease_id,
            instance_id=self.instance_id,
            command=req.command,
            args=tuple(req.args),
            env=dict(req.env),
            cwd=req.cwd,
            term_grace_ms=self.term_grace_ms,
            stderr_log=stderr_log_path(self.state_dir, lease_id),
        )
        report_r, report_w = os.pipe()
        argv = wrapper_argv(self.wrapper, spec, parent_pid=os.getpid(), report_fd=report_w)
        lease = LeaseRecord(
            lease_id=lease_id,
            gateway_instance_id=self.instance_id,
            session_key=req.session_key,
            wrapper_root=str(self.wrapper.root),
            wrapper_path=str(self.wrapper.path),
            command_hash=command_hash(argv),
            started_at=now_ms(),
        )
        self._spawning.add(lease_id)
        try:
            try:
                await self.store.insert(lease)  # durable before the spawn
            except BaseException:
                os.close(report_r)
                os.close(report_w)
                raise
            try:
                spawned = await spawn_wrapper(argv, spec, report_r, report_w)
            except OSError as exc:
                await self.store.transition(lease, LeaseState.LOST, now_ms=now_ms())
                raise Unavailable(f"cannot start the wrapper: {exc}") from None
            process = spawned.process
            channel = AdapterChannel(lease_id, process, spawned.report, spec.stderr_log)
            self.channels[lease_id] = channel
            try:
                root_start = await self._read_birth(process.pid)
            except ProcessTableError as exc:
                await self._abandon_unidentified(channel, lease, str(exc))
                raise Unavailable(f"cannot start adapter: {exc}") from None
            lease = await self._complete(
                channel, replace(lease, root_pid=process.pid, root_start_time=root_start)
            )
            try:
                started = await asyncio.wait_for(asyncio.shield(channel.started), START_TIMEOUT_SECS)
            except (SpawnFailed, TimeoutError) as exc:
                reason = str(exc) or "the wrapper did not report the adapter's start"
                await self.close_session(lease_id=lease_id, reason="spawn-failed")
                self.channels.pop(lease_id, None)
                await channel.aclose()
                raise Unavailable(f"cannot start adapter: {reason}") from None
            lease = await self._complete(
                channel,
                replace(lease, process_group_id=started.pgid, adapter_pid=started.adapter_pid),
            )
        finally:
            self._spawning.discard(lease_id)
        task = asyncio.create_task(self._record_exit(channel))
        self._exit_tasks.add(task)
        task.add_done_callback(self._exit_tasks.discard)
        log.info(
            "lease_spawned",
            lease_id=lease_id,
            session_key=req.session_key,
            root_pid=lease.root_pid,
            adapter_pid=lease.adapter_pid,
        )
        return lease

    async def _read_birth(self, pid: int) -> int:
        """The birth identity (start time) of the just-spawned wrapper ``pid``.

        Retried briefly: a transient read failure must not become a stored 0,
        which every later verification would take for a reused PID (the lease
        would end lost with its wrapper never signalled). Raises
        :class:`ProcessTableError` when it still cannot be read.
        """
        why = ""
        for attempt in range(BIRTH_READ_ATTEMPTS):
            if attempt:
                await asyncio.sleep(BIRTH_READ_RETRY_SECS)
            try:
                info = await self.table.get(pid)
            except ProcessTableError as exc:
                why = str(exc)
                continue
            if info is not None and info.start_time > 0:
                return info.start_time
            why = "not in the process table"
        raise ProcessTableError(f"cannot read the wrapper's birth identity (pid {pid}): {why}")

    async def _abandon_unidentified(
        self, channel: AdapterChannel, lease: LeaseRecord, why: str
    ) -> None:
        """Stop a wrapper whose birth identity could not be read, and end its lease.

        Without the identity no later verification can prove the tree is ours,
        so it must not outlive the spawn. We still hold its asyncio handle and
        have not reaped it, so its PID cannot have been reused: signalling it
        through the handle is safe. SIGTERM lets the wrapper stop its adapter
        group itself; SIGKILL only if it does not exit in time.
        """
        process = channel.process
        log.warning("wrapper_birth_unreadable", lease_id=lease.lease_id, why=why)
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), self.term_grace_ms / 1000 + 2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 2.0)
        async with self.store.lock(lease.lease_id):
            current = await self.store.get(lease.lease_id)
            if current is not None and current.state == LeaseState.OPEN:
                await self.store.transition(current, LeaseState.CLOSED, now_ms=now_ms())
        await self._retire_channel(channel)

    async def _complete(self, channel: AdapterChannel, lease: LeaseRecord) -> LeaseRecord:
        """Store what the spawn learnt about its tree, only while the lease is still open.

        A close (by lease id or session key) does not take the key lock, so it can
        end the lease while the spawn is in flight, e.g. as lost before the wrapper
        existed. Writing the tree onto such a lease would leave an adapter nobody
        can close. The write is a compare-and-set under the lease's lock (so no
        close runs meanwhile); when it fails, the just-spawned tree is stopped
        through the verified reap path and the spawn fails with Unavailable.
        """
        changes = {
            "root_pid": lease.root_pid,
            "root_start_time": lease.root_start_time,
            "process_group_id": lease.process_group_id,
            "adapter_pid": lease.adapter_pid,
        }
        async with self.store.lock(lease.lease_id):
            completed = await self.store.update(
                lease.lease_id, expect=[LeaseState.OPEN], **changes
            )
            if completed is not None:
                return completed
            result = await self.reaper.stop_stray(lease, reason="closed-during-spawn")
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
        await self._retire_channel(channel)
        raise Unavailable("cannot start adapter: the session was closed while it was starting")

    async def _retire_channel(self, channel: AdapterChannel) -> None:
        """Forget a channel whose processes were stopped; let its exit land, stop reading."""
        self.channels.pop(channel.lease_id, None)
        try:
            await asyncio.wait_for(channel.finished.wait(), self.term_grace_ms / 1000 + 3.0)
        except TimeoutError:
            log.warning("channel_not_finished_after_close", lease_id=channel.lease_id)
        await channel.aclose()

    async def _record_exit(self, channel: AdapterChannel) -> None:
        """Store the adapter's exit on its lease when it is known."""
        await channel.finished.wait()
        info = channel.exit_info
        if info is None:
            return
        await self.store.update(
            channel.lease_id,
            exit_code=info.exit_code if info.exit_code >= 0 else None,
            exit_signal=info.signal or None,
        )

    # ------------------------------------------------------------------ queries

    async def get_lease(self, lease_id: str) -> LeaseRecord:
        """One lease; LeaseNotFound if unknown."""
        lease = await self.store.get(lease_id)
        if lease is None:
            raise LeaseNotFound(f"unknown lease {lease_id!r}")
        return lease

    async def list_leases(
        self, state: LeaseState | None = None, session_key: str = ""
    ) -> list[LeaseRecord]:
        """ListLeases."""
        return await self.store.list(states=[state] if state else (), session_key=session_key)

    async def verify(self, lease_id: str) -> Verification:
        """VerifyOwnedTree (read-only)."""
        return await self.reaper.verify(await self.get_lease(lease_id))

    def channel(self, lease_id: str) -> AdapterChannel | None:
        """The live channel of a lease spawned by this run, if any."""
        return self.channels.get(lease_id)

    # ------------------------------------------------------------------ close / reap

    async def close_session(
        self, *, lease_id: str = "", session_key: str = "", reason: str = "close"
    ) -> CloseResult:
        """CloseSession: by lease id, or the open lease of a session key."""
        if not lease_id:
            if not session_key:
                raise InvalidRequest("lease_id or session_key is required")
            leases = await self.store.list(
                states=LIVE_STATES, session_key=session_key, instance_id=self.instance_id
            )
            if not leases:
                raise LeaseNotFound(f"no open lease for session {session_key!r}")
            results = [await self.close_session(lease_id=x.lease_id, reason=reason) for x in leases]
            return results[-1]
        if await self.store.get(lease_id) is None:
            raise LeaseNotFound(f"unknown lease {lease_id!r}")
        channel = self.channels.get(lease_id)
        if channel is not None and not channel.running:
            # The adapter exited and its wrapper is finishing on its own: let it,
            # so the lease ends as what it is (lost: nothing left to signal).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.process.wait(), self.term_grace_ms / 1000 + 1.0)
        result = await self.reaper.close(lease_id, reason)
        if channel is not None and result.lease is not None and result.lease.state != LeaseState.OPEN:
            self.channels.pop(lease_id, None)
            # The adapter is gone: let the exit reach any attacher, then stop reading.
            try:
                await asyncio.wait_for(channel.finished.wait(), 3.0)
            except TimeoutError:
                log.warning("channel_not_finished_after_close", lease_id=lease_id)
            await channel.aclose()
        await self.expire()
        return result

    async def reap_orphans(self, reason: str = "reap") -> list[CloseResult]:
        """Close this gateway's open/closing leases not served by this run.

        Leases with a channel of this run (its adapter exited) go through
        :meth:`close_session`, which also retires the channel; every other orphan
        is reaped in one batched pass (:meth:`Reaper.reap_all`): one process
        listing, one durable closing transaction, one grace period. A lease whose
        reap fails is logged and left open/closing for a later pass; it never
        stops the others (nor, at startup, the service).
        """
        leases = await self.store.list(states=LIVE_STATES, instance_id=self.instance_id)
        # Taken after the listing: a spawn that began while it was read is in
        # _spawning by now (it is added before its lease is inserted), so its
        # pending lease is never mistaken for an orphan.
        live = {lid for lid, ch in self.channels.items() if ch.running} | self._spawning
        results: dict[str, CloseResult] = {}
        failed: set[str] = set()
        for lease in leases:
            if lease.lease_id in self.channels and lease.lease_id not in live:
                try:
                    results[lease.lease_id] = await self.close_session(
                        lease_id=lease.lease_id, reason=reason)
                except Exception as exc:  # one lease never stops the pass
                    failed.add(lease.lease_id)
                    log.error("reap_failed", lease_id=lease.lease_id, reason=reason,
                              why=f"{type(exc).__name__}: {exc}")
        orphans = {lease.lease_id for lease in leases} - live - set(results) - failed
        try:
            batch = await self.reaper.reap_all(only=orphans, reason=reason)
        except Exception as exc:  # left open/closing: the next pass retries
            log.error("reap_failed", leases=sorted(orphans), reason=reason,
                      why=f"{type(exc).__name__}: {exc}")
            batch = []
        for result in batch:
            if result.lease is not None and result.lease.lease_id in orphans:
                results[result.lease.lease_id] = result
        if orphans:
            await self.expire()
        return [results[lease.lease_id] for lease in leases if lease.lease_id in results]

    async def expire(self) -> list[str]:
        """Drop closed/lost leases past retention, and their stderr logs."""
        ids = await self.store.expire(now_ms(), self.retention_secs)
        if ids:
            # A startup reap can expire many leases at once: unlink off the loop.
            await asyncio.to_thread(_remove_stderr_logs, self.state_dir, ids)
        return ids

    async def close_all(self, reason: str = "stop") -> list[CloseResult]:
        """Close every lease this run holds (service stop)."""
        results: list[CloseResult] = []
        for lease_id in list(self.channels):
            try:
                results.append(await self.close_session(lease_id=lease_id, reason=reason))
            except LeaseNotFound:
                continue
        if self._exit_tasks:
            # Let the exits already known reach the store before it closes.
            await asyncio.wait(list(self._exit_tasks), timeout=1.0)
        for task in list(self._exit_tasks):
            task.cancel()
        for channel in list(self.channels.values()):
            await channel.aclose()
        self.channels.clear()
        return results


def _remove_stderr_logs(state_dir: Path, lease_ids: list[str]) -> None:
    """Delete the stderr logs (and rotated parts) of expired leases (blocking)."""
    for lease_id in lease_ids:
        path = stderr_log_path(state_dir, lease_id)
        for p in (path, path.with_name(path.name + ".1")):
            p.unlink(missing_ok=True)
