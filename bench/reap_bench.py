"""Report rows #6 (reap): startup reap of 500 open leases on the fake process table.

Each lease has a live wrapper and adapter in a :class:`FakeProcessTable`
(cmdline, birth time, environment marks and process group exactly as a real
spawn records them), in a real SQLite lease store. The timed part is
``Reaper.reap_all`` — what the lifecycle service runs at start — verifying and
reaping every tree. Baseline: the lease-store floor, moving the same number of
leases open → closing → closed (one transaction per step, as the reaper does)
with no verification and no signals.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.sizes import Sizes
from bench.stats import Dist, Row
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import FakeProc, FakeProcessTable
from services.lifecycle.processes.verify import INSTANCE_ENV, LEASE_ENV, Owner, command_hash
from services.lifecycle.reaping.reaper import Reaper

INSTANCE = "gw-bench"
ROOT = "/srv/acpgate/lifecycle/wrapper"
WRAPPER = f"{ROOT}/acpgate_wrapper.py"
PY = "/usr/bin/python3"
ADAPTER = ("/opt/agents/bin/agent", "--acp")
GRACE_MS = 3000


def _tree(i: int) -> tuple[LeaseRecord, list[FakeProc]]:
    lease_id = f"lease-{i:05d}"
    wpid, apid = 2000 + 2 * i, 2001 + 2 * i
    argv = (PY, "-I", "-S", WRAPPER, "--lease-id", lease_id, "--instance-id", INSTANCE,
            "--parent-pid", "77", "--", *ADAPTER)
    marks = {LEASE_ENV: lease_id, INSTANCE_ENV: INSTANCE, "PATH": "/usr/bin"}
    lease = LeaseRecord(lease_id=lease_id, gateway_instance_id=INSTANCE,
                        session_key=f"agent:a:acp:s{i}", wrapper_root=ROOT, wrapper_path=WRAPPER,
                        command_hash=command_hash(argv), started_at=1 + i, root_pid=wpid,
                        root_start_time=10_000 + i, process_group_id=apid, adapter_pid=apid)
    procs = [FakeProc(wpid, 77, 77, 10_000 + i, argv, PY, dict(marks)),
             FakeProc(apid, wpid, apid, 10_001 + i, ADAPTER, ADAPTER[0], dict(marks))]
    return lease, procs


async def _seeded(path: Path, n: int) -> tuple[LeaseStore, FakeProcessTable]:
    store = await LeaseStore.open(path)
    table = FakeProcessTable()
    for i in range(n):
        lease, procs = _tree(i)
        await store.insert(lease)
        for proc in procs:
            table.add(proc)
    return store, table


async def _reap_once(workdir: Path, n: int) -> tuple[float, int]:
    store, table = await _seeded(workdir / "reap.db", n)
    try:
        reaper = Reaper(store, table, Owner(instance_id=INSTANCE, wrapper_root=ROOT),
                        term_grace_ms=GRACE_MS)
        t0 = time.monotonic()
        results = await reaper.reap_all(reason="startup")
        elapsed = (time.monotonic() - t0) * 1000
        closed = sum(1 for r in results if r.lease is not None and r.lease.state == LeaseState.CLOSED)
        if table.procs:
            raise RuntimeError(f"{len(table.procs)} simulated processes survived the reap")
        return elapsed, closed
    finally:
        await store.close()


async def _floor_once(workdir: Path, n: int) -> float:
    store, _ = await _seeded(workdir / "floor.db", n)
    try:
        t0 = time.monotonic()
        leases = await store.list(states=(LeaseState.OPEN,), instance_id=INSTANCE)
        # The reaper batches each step in one transaction; so does its floor.
        closing = await store.transition_many([(lease, LeaseState.CLOSING) for lease in leases])
        assert all(c is not None for c in closing)
        await store.transition_many([(c, LeaseState.CLOSED) for c in closing if c], now_ms=1)
        return (time.monotonic() - t0) * 1000
    finally:
        await store.close()


async def run_reap(sizes: Sizes) -> list[Row]:
    """Rows #6: the startup reap."""
    reaps: list[float] = []
    floors: list[float] = []
    closed = 0
    for _ in range(sizes.reap_samples):
        with tempfile.TemporaryDirectory(prefix="acpb-reap-") as tmp:
            ms, closed = await _reap_once(Path(tmp), sizes.reap_leases)
            reaps.append(ms)
            floors.append(await _floor_once(Path(tmp), sizes.reap_leases))
    n = sizes.reap_leases
    d = Dist.of(reaps)
    return [Row("6", f"startup reap of {n} open leases (fake process table)", "ms", d,
                "lease-store floor: same transitions, no verification/signals", Dist.of(floors),
                note=f"{d.median / n:.2f} ms per lease; {closed}/{n} leases closed, "
                     f"{2 * n} simulated processes signalled and gone")]
