"""Startup reaping across slots: one's own leftovers, and the leases of dead slots only.

Every lifecycle service on a data dir holds an instance slot
(:mod:`services.lifecycle.leases.instance_slots`); a slot's leases carry its instance id. At start a
service reaps (SPEC §13 reapStartupOrphans):

- its own slot's live leases: what the previous holder of the slot left (a killed
  ``acpgate acp``, a restarted ``serve``'s lifecycle child);
- the live leases of every other slot of the install *whose lock it can take*: the
  holder is dead, its leases are orphans. It holds that slot's lock for the whole
  pass, so no process starting meanwhile can take the slot and spawn under it, and
  reaps as that slot (its instance id: verification then proves each tree is that
  slot's and no one else's), then lets the slot go;
- never a slot whose lock is held: a live process owns those leases, and its agents
  are never touched.

Leases written before slots existed carry the install's id, which is slot 0's. Records
written before leases existed (no lease id, no slot) are slot 0's holder's to import and
reap, after all that (:mod:`services.lifecycle.startup.legacy_records`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from services.common.logs import get_logger
from services.lifecycle.leases.instance_slots import slot_instance_id, slot_of, try_slot
from services.lifecycle.leases.store import LIVE_STATES
from services.lifecycle.processes.verify import Owner
from services.lifecycle.reaping.reaper import CloseResult, Reaper
from services.lifecycle.startup.legacy_records import reap_legacy

if TYPE_CHECKING:  # the controller calls in here; this module only reads it
    from services.lifecycle.controller import LifecycleController

__all__ = ["other_slots_with_leases", "reap_at_start", "reap_dead_slots"]

log = get_logger("lifecycle.slots")


async def other_slots_with_leases(controller: LifecycleController) -> list[int]:
    """The other slots of this install that have live leases, lowest first (held or not)."""
    own = controller.slot.number if controller.slot is not None else None
    numbers = {slot_of(controller.install_id, iid)
               for iid in await controller.store.instance_ids(LIVE_STATES)}
    return sorted(n for n in numbers if n is not None and n != own)


async def reap_dead_slots(controller: LifecycleController, reason: str = "startup") -> list[CloseResult]:
    """Reap the live leases of every other slot whose holder is dead (its lock is free).

    A slot whose lock another process holds is skipped: its leases are that
    process's. A failure on one slot is logged and leaves its leases for a later
    start; it never stops the others.
    """
    results: list[CloseResult] = []
    for number in await other_slots_with_leases(controller):
        slot = await asyncio.to_thread(try_slot, controller.state_dir, number)
        if slot is None:
            continue  # its holder is alive
        try:
            owner = Owner(instance_id=slot_instance_id(controller.install_id, number),
                          wrapper_root=controller.owner.wrapper_root)
            reaper = Reaper(controller.store, controller.table, owner,
                            term_grace_ms=controller.term_grace_ms)
            reaped = await reaper.reap_all(reason=reason)
            log.info("dead_slot_reaped", slot=number, instance_id=owner.instance_id,
                     leases=len(reaped),
                     terminated=sum(len(r.terminated_pids) for r in reaped))
            results.extend(reaped)
        except Exception as exc:  # left open/closing: the next start retries
            log.error("dead_slot_reap_failed", slot=number, why=f"{type(exc).__name__}: {exc}")
        finally:
            slot.release()
    return results


async def reap_at_start(controller: LifecycleController) -> None:
    """Expire old leases, reap this slot's leftovers, then the dead slots', then (slot 0
    only) the legacy records (SPEC §13).

    Startup reaping is cleanup: a failure is reported, it never stops the service;
    the leftovers stay open/closing for a later reap.
    """
    await controller.expire()
    try:
        results = await controller.reap_orphans(reason="startup")
    except Exception as exc:  # leftovers stay open/closing for a later reap
        log.error("startup_reap_failed", instance_id=controller.instance_id,
                  why=f"{type(exc).__name__}: {exc}")
        results = []
    others = await reap_dead_slots(controller)
    log.info(
        "startup_reap",
        instance_id=controller.instance_id,
        slot=controller.slot.number if controller.slot is not None else 0,
        leases=len(results),
        terminated=sum(len(r.terminated_pids) for r in results),
        unverified=[r.unverified_reason for r in results if r.unverified_reason],
        dead_slot_leases=len(others),
    )
    try:
        await reap_legacy(controller)
    except Exception as exc:  # pending records stay for the next start of slot 0
        log.error("legacy_reap_failed", instance_id=controller.instance_id,
                  why=f"{type(exc).__name__}: {exc}")
