"""The lifecycle controller: leases, spawns, channels and reaping for one gateway.

The gRPC servicer is a thin translation layer over this class; tests and the embedded
mode use it directly. One controller per lifecycle state dir. Each spawn (and each wrapper
re-adopted, :mod:`services.lifecycle.startup.adopt`) is watched: a wrapper that dies has its lease
closed at once, through the same verified reap as any close. The warm pools
(:mod:`services.lifecycle.adapters.warm`) spawn through it and hand their leases to ``ensure_session``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, NamedTuple

from services.common.logs import get_logger
from services.lifecycle.adapters.control_channel import AdoptPolicy, WrapperLink, forget_control
from services.lifecycle.adapters.launch import Launch, LaunchContext, plan_launch
from services.lifecycle.adapters.pool_spec import launch_reads
from services.lifecycle.adapters.spawn import WrapperPaths, remove_stderr_logs
from services.lifecycle.adapters.warm import WarmPools
from services.lifecycle.attach.channel import AdapterChannel
from services.lifecycle.leases.holds import StreamHolds
from services.lifecycle.leases.instance_slots import Slot
from services.lifecycle.leases.store import LIVE_STATES, LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import ProcessTable
from services.lifecycle.processes.verify import Owner, Verification
from services.lifecycle.reaping.reaper import CloseResult, Reaper, now_ms
from services.lifecycle.requests import (
    EnsureRequest,
    InstanceInfo,
    InvalidRequest,
    LeaseNotFound,
    NoWarmAdapter,
    Unavailable,
    check_spec,
)

__all__ = ["EnsureRequest", "Ensured", "InstanceInfo", "InvalidRequest", "LeaseNotFound",
           "LifecycleController", "NoWarmAdapter", "Unavailable"]

log = get_logger("lifecycle.controller")


class Ensured(NamedTuple):
    """What EnsureSession did: the lease, whether it is new, whether a pool gave it."""

    lease: LeaseRecord
    spawned: bool
    warm: bool = False


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
        install_id: str = "",
        slot: Slot | None = None,
        adoption: AdoptPolicy | None = None,
    ) -> None:
        self.store = store
        #: The wrappers' adoption window and control channels (None or 0 s: none).
        self.adoption = adoption
        self.table = table
        #: This slot's gateway instance id: its leases, its wrappers' marks, its claims.
        self.instance_id = instance_id
        #: The install's instance id, which every slot's is derived from (services.lifecycle.leases.instance_slots).
        self.install_id = install_id or instance_id
        #: The slot this service holds for its life (None: a controller outside any slot, tests).
        self.slot = slot
        self.state_dir = state_dir
        self.wrapper = wrapper
        self.term_grace_ms = term_grace_ms
        self.retention_secs = retention_secs
        self.owner = Owner(instance_id=instance_id, wrapper_root=str(wrapper.root))
        self.reaper = Reaper(store, table, self.owner, term_grace_ms=term_grace_ms)
        self.started_at = now_ms()
        self.channels: dict[str, AdapterChannel] = {}
        #: Lease ids of the spawns in flight (their leases are pending, not orphans).
        self.spawning: set[str] = set()
        self._key_locks: dict[str, asyncio.Lock] = {}
        self._exit_tasks: set[asyncio.Task[None]] = set()
        #: Watchers of each channel's wrapper.
        self._death_tasks: set[asyncio.Task[None]] = set()
        #: Closes started in the background (a wrapper's death, an abandoned ensure).
        self._background_closes: set[asyncio.Task[None]] = set()
        self.pools = WarmPools(self)
        self.holds = StreamHolds()  # the leases Attach streams ensured and still hold

    def instance(self) -> InstanceInfo:
        """GetInstance."""
        return InstanceInfo(
            self.instance_id, str(self.state_dir), str(self.wrapper.root), self.started_at,
            slot=self.slot.number if self.slot is not None else 0, install_id=self.install_id,
        )

    # ------------------------------------------------------------------ ensure

    def _key_lock(self, key: str) -> asyncio.Lock:
        return self._key_locks.setdefault(key, asyncio.Lock())

    async def ensure_session(self, req: EnsureRequest, *, hold: bool = False) -> Ensured:
        """The live open lease of ``req.session_key``, else a warm one of ``req.warm_pool``,
        else a new spawn; ``hold`` (an Attach stream's): held until the stream let it go. A
        lease another stream holds is not handed out: its let-go is waited for (:mod:`.leases.holds`).

        What it reads goes out at once: the key's leases from the store, and in one
        thread hop the cwd check and the pool's file fingerprint (a warm take is on
        session/new's critical path; bench/PROFILE.md).
        """
        if not req.session_key:
            raise InvalidRequest("session_key is required")
        check_spec(req.command, req.args)
        pool = self.pools.pool_for(req)
        async with self._key_lock(req.session_key):
            (refusal, current), existing = await asyncio.gather(
                asyncio.to_thread(launch_reads, req.cwd, pool.spec if pool else None),
                self.store.list(states=LIVE_STATES, session_key=req.session_key,
                                instance_id=self.instance_id))
            if refusal is not None:
                raise refusal
            while held := self.holds.first_held(existing):  # another stream's, being let go
                await self.holds.wait_let_go(held, req.session_key, warm_only=req.warm_only)
                existing = await self.store.list(states=LIVE_STATES, session_key=req.session_key,
                                                 instance_id=self.instance_id)
            for lease in existing:
                channel = self.channels.get(lease.lease_id)
                if channel is not None and channel.running and lease.state == LeaseState.OPEN:
                    return Ensured(lease, False)
            for lease in existing:
                # Its adapter died or it belongs to an earlier run: settle it first.
                await self.close_session(lease_id=lease.lease_id, reason="replaced")
            if pool is not None:
                taken = await pool.take(req.session_key, current)
                if taken is not None:
                    return self.holds.held(hold, Ensured(taken, True, warm=True))
            if req.warm_only:
                raise NoWarmAdapter(f"no warm adapter of {req.warm_pool or '(no pool)'} is ready")
            return self.holds.held(hold, Ensured(await self._spawn(req), True))

    async def spawn_warm(self, req: EnsureRequest) -> LeaseRecord:
        """A warm pool's spawn: like any, but its lease starts warm."""
        return await self._spawn(req, LeaseState.WARM)

    async def _spawn(self, req: EnsureRequest, state: LeaseState = LeaseState.OPEN) -> LeaseRecord:
        """A new lease and its tree for ``req`` (:class:`~services.lifecycle.adapters.launch.Launch`)."""
        plan = plan_launch(
            req,
            instance_id=self.instance_id,
            wrapper=self.wrapper,
            state_dir=self.state_dir,
            term_grace_ms=self.term_grace_ms,
            state=state,
            adoption=self.adoption,
        )
        lease, channel = await Launch(self.launch_context(), plan).run()
        self.watch(channel)
        log.info(
            "lease_spawned",
            lease_id=lease.lease_id,
            session_key=req.session_key,
            state=lease.state.value,
            root_pid=lease.root_pid,
            adapter_pid=lease.adapter_pid,
        )
        return lease

    def launch_context(self) -> LaunchContext:
        """What a :class:`~services.lifecycle.adapters.launch.Launch` may use of this
        controller (its collections shared, the rest as they are now)."""
        return LaunchContext(
            store=self.store, table=self.table, reaper=self.reaper,
            term_grace_ms=self.term_grace_ms, spawning=self.spawning, channels=self.channels,
            adoption=self.adoption, close_session=self.close_session)

    def control_for(self, lease_id: str, wrapper_pid: int) -> WrapperLink | None:
        """The control channel of a wrapper spawned with an adoption window (else None)."""
        return WrapperLink.of(self.adoption, lease_id, wrapper_pid)

    def watch(self, channel: AdapterChannel) -> None:
        """Watch a channel's adapter exit and its wrapper's death (a spawn's, an adoption's)."""
        self._watch_exit(channel)
        self._watch_wrapper(channel)

    def _watch_exit(self, channel: AdapterChannel) -> None:
        """Record the adapter's exit on its lease once it is known (in the background)."""
        (task := asyncio.create_task(self._record_exit(channel))).add_done_callback(
            self._exit_tasks.discard)
        self._exit_tasks.add(task)

    def _watch_wrapper(self, channel: AdapterChannel) -> None:
        """Reap the lease's tree if its wrapper dies (in the background)."""
        (task := asyncio.create_task(self._reap_after_wrapper_death(channel))).add_done_callback(
            self._death_tasks.discard)
        self._death_tasks.add(task)

    async def _reap_after_wrapper_death(self, channel: AdapterChannel) -> None:
        """A wrapper that died (SIGKILL, a crash) left its tree unsupervised: close the lease.

        The adapter got SIGTERM from its parent-death signal, but it may ignore it, and a
        detached descendant gets nothing. The close verifies and reaps like any close. A
        wrapper that ended in order (it reported the exit) is left to the client's close.
        """
        if not await channel.wrapper_died():
            return
        if self.channels.get(channel.lease_id) is not channel:
            return  # already closed (or replaced) by this run
        log.warning("wrapper_died", lease_id=channel.lease_id,
                    returncode=channel.process.returncode)
        # Its own task: a service stop cancels idle watchers, never a reap under way.
        await asyncio.shield(self.close_later(channel.lease_id, "wrapper-died"))

    def close_later(self, lease_id: str, reason: str) -> asyncio.Task[None]:
        """Close ``lease_id`` in a task of its own, which a service stop waits for
        (failures are logged)."""
        return self._in_background(self._close_quietly(lease_id, reason))

    def give_back_later(self, lease_id: str, pool: str) -> asyncio.Task[None]:
        """Return the untouched warm adapter of ``lease_id`` to ``pool``, or close it when
        the pool does not take it back (in a task of its own, like :meth:`close_later`)."""
        async def give_back() -> None:
            if not await self.pools.give_back(pool, lease_id):
                await self._close_quietly(lease_id, "detached")
        return self._in_background(give_back())

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._background_closes.add(task)
        task.add_done_callback(self._background_closes.discard)
        return task

    async def _close_quietly(self, lease_id: str, reason: str) -> None:
        """:meth:`close_session` from a background task: failures are logged, not raised."""
        try:
            await self.close_session(lease_id=lease_id, reason=reason)
        except LeaseNotFound:
            pass
        except Exception as exc:  # left open: the client's close or the next startup retries
            log.error("reap_failed", lease_id=lease_id, reason=reason,
                      why=f"{type(exc).__name__}: {exc}")

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
            # Its report pipe's EOF says when: wait() would also wait for the
            # ACP pipes, which a surviving descendant may hold.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.wrapper_gone.wait(), self.term_grace_ms / 1000 + 1.0)
        result = await self.reaper.close(lease_id, reason)
        if result.lease is not None and result.lease.state != LeaseState.OPEN:
            await forget_control(self.adoption, lease_id)
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
        # spawning by now (it is added before its lease is inserted), so its
        # pending lease is never mistaken for an orphan.
        live = {lid for lid, ch in self.channels.items() if ch.running} | self.spawning
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
            await asyncio.to_thread(remove_stderr_logs, self.state_dir, ids)
        return ids

    async def close(self) -> None:
        """Close the lease store, then give the slot up (after :meth:`close_all`)."""
        try:
            await self.store.close()
        finally:
            if self.slot is not None:
                self.slot.release()

    async def close_all(self, reason: str = "stop") -> list[CloseResult]:
        """Close every lease this run holds, warm ones included (service stop)."""
        await self.pools.stop()  # no spawn may start while the leases are closed
        results: list[CloseResult] = []
        for lease_id in list(self.channels):
            try:
                results.append(await self.close_session(lease_id=lease_id, reason=reason))
            except LeaseNotFound:
                continue
        if self._background_closes:
            # A reap after a wrapper's death finishes before the store closes.
            await asyncio.wait(list(self._background_closes))
        if self._exit_tasks:
            # Let the exits already known reach the store before it closes.
            await asyncio.wait(list(self._exit_tasks), timeout=1.0)
        for task in [*self._death_tasks, *self._exit_tasks]:
            task.cancel()
        for channel in list(self.channels.values()):
            await channel.aclose()
        self.channels.clear()
        return results


