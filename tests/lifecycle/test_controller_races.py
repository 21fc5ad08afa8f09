"""Races between a spawn in flight and the orphan reap of the controller (SPEC §13).

A lease is written before its wrapper exists (pending). An orphan reap that
overlaps the spawn must not take that pending lease for an earlier run's
leftover: it would find no live wrapper and end the lease as lost while the
spawn goes on to start an adapter nobody can close.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from pathlib import Path

from services.lifecycle.adapters.spawn import WrapperPaths
from services.lifecycle.controller import LifecycleController
from services.lifecycle.leases.store import LeaseRecord, LeaseState, LeaseStore
from services.lifecycle.processes.table import FakeProcessTable
from tests.lifecycle.test_simulator import INSTANCE, ROOT, WRAPPER


class SpawnDuringListStore(LeaseStore):
    """A store whose first live-lease listing lets a spawn begin while it is read.

    The spawn does what ``Launch.run`` does before its wrapper
    exists: mark the lease as spawning, then write it durably (pending).
    """

    controller: LifecycleController | None = None
    pending: LeaseRecord | None = None

    async def list(
        self,
        *,
        states: Iterable[LeaseState] = (),
        session_key: str = "",
        instance_id: str = "",
    ) -> builtins.list[LeaseRecord]:
        pending, self.pending = self.pending, None
        if pending is not None and self.controller is not None:
            self.controller.spawning.add(pending.lease_id)
            await self.insert(pending)
        return await super().list(states=states, session_key=session_key, instance_id=instance_id)


async def test_reap_orphans_spares_a_spawn_that_begins_during_the_listing(tmp_path: Path) -> None:
    store = await SpawnDuringListStore.open(tmp_path / "leases.db")
    try:
        controller = LifecycleController(
            store=store,
            table=FakeProcessTable(),
            instance_id=INSTANCE,
            state_dir=tmp_path,
            wrapper=WrapperPaths(root=Path(ROOT), path=Path(WRAPPER)),
            term_grace_ms=100,
            retention_secs=3600,
        )
        leftover = LeaseRecord(
            lease_id="leftover", gateway_instance_id=INSTANCE, session_key="agent:a:acp:old",
            wrapper_root=ROOT, wrapper_path=WRAPPER, command_hash="x", started_at=1,
        )
        await store.insert(leftover)
        store.controller = controller
        store.pending = LeaseRecord(
            lease_id="in-flight", gateway_instance_id=INSTANCE, session_key="agent:a:acp:new",
            wrapper_root=ROOT, wrapper_path=WRAPPER, command_hash="y", started_at=2,
        )

        results = await controller.reap_orphans()

        # The earlier run's pending lease has no wrapper: it is reaped as lost.
        assert [r.lease.lease_id for r in results if r.lease] == ["leftover"]
        old = await store.get("leftover")
        assert old is not None and old.state == LeaseState.LOST
        # The spawn in flight keeps its open lease.
        new = await store.get("in-flight")
        assert new is not None and new.state == LeaseState.OPEN
    finally:
        await store.close()
