"""Warm pools: adapters spawned ahead of their session (lifecycle proto, KeepWarm).

A pool keeps ``count`` adapters of one launch spec spawned and waiting, each
under its own lease in state warm: spawned through the same steps as any
(:mod:`services.lifecycle.adapters.launch`), verified and reaped like any lease, covered
by the startup reap, closed when the service stops. A warm adapter is never
attachable and nothing is written to it: the lifecycle service does not speak
ACP (ARCHITECTURE rule 2), the edge initializes it once a session took it.

``EnsureSession`` naming the pool takes the oldest ready adapter whose launch
spec (command, args, env) is the request's: one compare-and-set warm → open
that also re-keys the lease to the session, then the pool refills in the
background. A change to what the adapter read when it started (its executable,
a file named in its args, the pool's ``watch_paths`` such as the built-in
agent's config file) retires the adapters started before it: each remembers
the files' fingerprint from its spawn, checked on every take and every
:data:`CHECK_SECS`. An adapter taken and left untouched (its Attach ended before
a line went either way) comes back (:meth:`WarmPool.give_back`): warm again,
under the pool's key, when the pool has room and its files did not change.
Adapters that die while waiting make the pool back off (:data:`BACKOFF_SECS`
doubling up to :data:`BACKOFF_MAX_SECS`) instead of respawning in a loop.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from services.common.logs import get_logger
from services.common.protocol import MAX_WARM_ADAPTERS
from services.lifecycle.adapters.pool_spec import PoolSpec, fingerprint, launch_key
from services.lifecycle.attach.channel import AdapterChannel
from services.lifecycle.leases.store import HELD_STATES, LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.reaping.reaper import CloseResult
from services.lifecycle.requests import EnsureRequest, InvalidRequest, LeaseNotFound, check_launch

log = get_logger("lifecycle.warm")

#: How often every pool re-checks its fingerprint and refills.
CHECK_SECS = 2.0
#: Warm spawns in flight at once, over all pools (the machine has other work).
SPAWN_CONCURRENCY = 2
#: How long after a take the refill waits: the spawn (an fsync'd lease insert, a fork
#: of this process, two interpreters starting) would otherwise compete with the session
#: being set up on it. A take meanwhile restarts the wait (a burst of takes is set up
#: first), up to :data:`REFILL_MAX_DELAY_SECS` after the first.
REFILL_DELAY_SECS = 0.25
REFILL_MAX_DELAY_SECS = 1.0
#: First pause after a warm adapter died or failed to start; doubles per failure.
BACKOFF_SECS = 0.5
BACKOFF_MAX_SECS = 60.0
#: Taken adapters a pool remembers (the most recent), so that an untouched one can return.
LENT_MAX = 64


class PoolHost(Protocol):
    """What a pool needs of the controller: spawns, closes and channels."""

    store: LeaseStore

    async def spawn_warm(self, req: EnsureRequest) -> LeaseRecord:
        """Spawn one adapter whose lease starts warm."""

    async def close_session(self, *, lease_id: str = "", session_key: str = "",
                            reason: str = "close") -> CloseResult:
        """Verify and reap one lease."""

    def channel(self, lease_id: str) -> AdapterChannel | None:
        """The live channel of a lease of this run."""


@dataclass
class WarmAdapter:
    """One adapter waiting in a pool."""

    lease_id: str
    #: :func:`fingerprint` of its pool's files, taken right before its spawn.
    fingerprint: str


class WarmPool:
    """The ready adapters of one spec, their refill and their retirement."""

    def __init__(self, spec: PoolSpec, pools: WarmPools) -> None:
        self.spec = spec
        self._pools = pools
        self.ready: collections.deque[WarmAdapter] = collections.deque()
        self.spawning = 0
        self.failures = 0
        #: Leases retired but not yet closed (a close that could not verify is retried).
        self.retiring: set[str] = set()
        self._filler: asyncio.Task[None] | None = None
        #: Loop time of the last take (the refill waits for a quiet moment after it).
        self._last_take = 0.0
        #: The adapters taken last, by lease id: only these may come back.
        self._lent: collections.OrderedDict[str, WarmAdapter] = collections.OrderedDict()

    # ------------------------------------------------------------------ fill

    def fill(self, delay: float = 0.0) -> None:
        """Start the refill task (after ``delay`` seconds) unless one runs already."""
        if self._filler is None or self._filler.done():
            self._filler = self._pools.track(self._fill(delay))

    async def _fill(self, delay: float) -> None:
        """Spawn until ``count`` are ready or spawning, backing off after failures."""
        pools = self._pools
        if delay:
            await self._quiet(delay)
        while not pools.stopped and len(self.ready) + self.spawning < self.spec.count:
            if self.failures:
                await asyncio.sleep(min(BACKOFF_MAX_SECS, BACKOFF_SECS * 2 ** (self.failures - 1)))
                if pools.stopped:
                    return
            self.spawning += 1
            pools.track(self._spawn_one(), work=True)
            await asyncio.sleep(0)  # let it take its slot before counting again

    async def _quiet(self, delay: float) -> None:
        """Wait until no take came for ``delay`` seconds, at most
        :data:`REFILL_MAX_DELAY_SECS` from now."""
        loop = asyncio.get_running_loop()
        latest = loop.time() + REFILL_MAX_DELAY_SECS
        while True:  # a take during the sleep moves the end: sleep again until then
            wait = min(self._last_take + delay, latest) - loop.time()
            if wait <= 0:
                return
            await asyncio.sleep(wait)

    async def _spawn_one(self) -> None:
        pools = self._pools
        try:
            async with pools.spawn_slots:
                if pools.stopped or pools.pools.get(self.spec.name) is not self:
                    return
                fp = await asyncio.to_thread(fingerprint, self.spec)
                lease = await pools.host.spawn_warm(self.spec.request())
        except Exception as exc:  # logged; the pool backs off and tries again
            self.failures += 1
            log.warning("warm_spawn_failed", pool=self.spec.name, failures=self.failures,
                        why=f"{type(exc).__name__}: {exc}")
            return
        finally:
            self.spawning -= 1
        adapter = WarmAdapter(lease.lease_id, fp)
        if pools.stopped or pools.pools.get(self.spec.name) is not self:
            self.retire(adapter, "warm-replaced")
            return
        self.ready.append(adapter)
        pools.track(self._watch(adapter))

    async def _watch(self, adapter: WarmAdapter) -> None:
        """Drop (and close) an adapter that exits while it waits; count it as a failure."""
        channel = self._pools.host.channel(adapter.lease_id)
        if channel is not None:
            await channel.finished.wait()
        if adapter in self.ready:
            self.ready.remove(adapter)
            self.failures += 1
            log.warning("warm_adapter_exited", pool=self.spec.name, lease_id=adapter.lease_id,
                        failures=self.failures)
            self.retire(adapter, "warm-exited")
            self.fill()

    # ------------------------------------------------------------------ take / retire

    async def take(self, session_key: str, current: str) -> LeaseRecord | None:
        """The oldest ready adapter started from the files as they are now (``current``:
        their :func:`fingerprint`), re-keyed to ``session_key`` and open; None if none."""
        self._last_take = asyncio.get_running_loop().time()
        self.retire_stale(current)
        store = self._pools.host.store
        try:
            while self.ready:
                adapter = self.ready.popleft()
                channel = self._pools.host.channel(adapter.lease_id)
                if channel is None or not channel.running:
                    self.retire(adapter, "warm-exited")
                    continue
                async with store.lock(adapter.lease_id):
                    # Not durable: a power cut that loses it also ended the processes,
                    # and the startup reap treats a warm and an open lease alike.
                    taken = await store.update(
                        adapter.lease_id, expect=[LeaseState.WARM], durable=False,
                        state=LeaseState.OPEN, session_key=session_key)
                if taken is not None:
                    self.failures = 0
                    self._lent[adapter.lease_id] = adapter
                    if len(self._lent) > LENT_MAX:
                        self._lent.popitem(last=False)
                    log.info("warm_taken", pool=self.spec.name, lease_id=taken.lease_id,
                             session_key=session_key)
                    return taken
            return None
        finally:
            self.fill(REFILL_DELAY_SECS)

    async def give_back(self, lease_id: str) -> bool:
        """Take back an adapter this pool lent and nobody touched: warm again under the
        pool's key, first in line. False (the caller closes it) when the pool no longer
        has room or runs, the adapter exited, or the files it started from changed."""
        adapter = self._lent.pop(lease_id, None)
        pools = self._pools
        channel = pools.host.channel(lease_id)
        if adapter is None or pools.stopped or pools.pools.get(self.spec.name) is not self \
                or channel is None or not channel.running \
                or len(self.ready) + self.spawning >= self.spec.count:
            return False
        if await asyncio.to_thread(fingerprint, self.spec) != adapter.fingerprint:
            return False
        async with pools.host.store.lock(lease_id):
            back = await pools.host.store.update(
                lease_id, expect=[LeaseState.OPEN], durable=False,
                state=LeaseState.WARM, session_key=self.spec.session_key)
        if back is None:
            return False
        self.ready.appendleft(adapter)  # its watcher from the spawn still runs
        log.info("warm_returned", pool=self.spec.name, lease_id=lease_id)
        self.trim()  # a refill that landed meanwhile
        return True

    def retire_stale(self, current: str) -> None:
        """Retire every ready adapter started before the watched files last changed."""
        stale = [a for a in self.ready if a.fingerprint != current]
        if stale:
            log.info("warm_pool_invalidated", pool=self.spec.name, retired=len(stale))
        for adapter in stale:
            self.ready.remove(adapter)
            self.retire(adapter, "warm-invalidated")

    def retire(self, adapter: WarmAdapter, reason: str) -> None:
        """Close ``adapter``'s lease in the background (retried by :meth:`check`)."""
        self.retiring.add(adapter.lease_id)
        self._pools.track(self._close(adapter.lease_id, reason), work=True)

    async def _close(self, lease_id: str, reason: str) -> None:
        try:
            result = await self._pools.host.close_session(lease_id=lease_id, reason=reason)
        except LeaseNotFound:
            self.retiring.discard(lease_id)
            return
        except Exception as exc:  # kept in retiring: the next check retries
            log.error("warm_retire_failed", lease_id=lease_id, why=f"{type(exc).__name__}: {exc}")
            return
        if result.lease is None or result.lease.state not in (*HELD_STATES, LeaseState.CLOSING):
            self.retiring.discard(lease_id)

    def trim(self) -> None:
        """Retire the newest ready adapters beyond ``count``."""
        while len(self.ready) > self.spec.count:
            self.retire(self.ready.pop(), "warm-trimmed")

    async def check(self) -> None:
        """Retire what went stale, retry failed retirements, refill."""
        self.retire_stale(await asyncio.to_thread(fingerprint, self.spec))
        for lease_id in list(self.retiring):
            self._pools.track(self._close(lease_id, "warm-retired"), work=True)
        self.fill()


class WarmPools:
    """Every pool of one lifecycle controller, by name."""

    def __init__(self, host: PoolHost) -> None:
        self.host = host
        self.pools: dict[str, WarmPool] = {}
        self.stopped = False
        self.spawn_slots = asyncio.Semaphore(SPAWN_CONCURRENCY)
        #: Refill loops and watchers (cancelled on stop) and spawns and closes (awaited).
        self._loops: set[asyncio.Task[None]] = set()
        self._work: set[asyncio.Task[None]] = set()
        self._checker: asyncio.Task[None] | None = None

    def track(self, coro: Coroutine[Any, Any, None], *, work: bool = False) -> asyncio.Task[None]:
        """Run a pool task, kept referenced until it ends; ``work`` is never cancelled
        (a spawn or a close stopped half-way would leave a lease nobody finishes)."""
        tasks = self._work if work else self._loops
        task = asyncio.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def keep(self, spec: PoolSpec) -> int:
        """KeepWarm: create, resize or replace the pool ``spec.name`` (it fills in the
        background); the adapters ready now."""
        if not spec.name:
            raise InvalidRequest("pool is required")
        if not 0 <= spec.count <= MAX_WARM_ADAPTERS:
            raise InvalidRequest(f"count must be between 0 and {MAX_WARM_ADAPTERS}")
        await check_launch(spec.command, spec.args, spec.cwd)
        if self.stopped:
            return 0
        pool = self.pools.get(spec.name)
        if pool is not None and pool.spec.same_launch(spec):
            pool.spec = spec
        else:
            old = pool
            pool = self.pools[spec.name] = WarmPool(spec, self)
            if old is not None:
                log.info("warm_pool_replaced", pool=spec.name, retired=len(old.ready))
                pool.retiring = old.retiring
                while old.ready:
                    pool.retire(old.ready.popleft(), "warm-replaced")
        pool.trim()
        pool.fill()
        if self._checker is None:
            self._checker = self.track(self._check_every())
        return len(pool.ready)

    def pool_for(self, req: EnsureRequest) -> WarmPool | None:
        """The pool a take for ``req`` draws from; None when it names none, that pool is
        unknown or stopped, or its adapters were spawned from another launch spec."""
        if not req.warm_pool:
            return None
        pool = self.pools.get(req.warm_pool)
        if pool is None or self.stopped:
            return None
        if pool.spec.key != launch_key(req.command, tuple(req.args), req.env, req.pass_env):
            log.info("warm_pool_mismatch", pool=req.warm_pool)
            return None
        return pool

    async def give_back(self, pool: str, lease_id: str) -> bool:
        """:meth:`WarmPool.give_back` of the pool named ``pool`` (False: none such)."""
        found = self.pools.get(pool)
        return found is not None and await found.give_back(lease_id)

    async def _check_every(self) -> None:
        while not self.stopped:
            await asyncio.sleep(CHECK_SECS)
            for pool in list(self.pools.values()):
                try:
                    await pool.check()
                except Exception as exc:  # one pool never stops the others
                    log.error("warm_check_failed", pool=pool.spec.name,
                              why=f"{type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        """No more spawns; wait for the spawns and closes in flight (the leases still
        warm are then closed with every other by the controller's ``close_all``)."""
        self.stopped = True
        for task in list(self._loops):
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        while self._work:  # a spawn that lands after the stop retires its adapter: more work
            await asyncio.gather(*self._work, return_exceptions=True)
