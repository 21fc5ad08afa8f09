"""Legacy records at start: imported once, reaped through the fail-safe path (SPEC §13).

A record without a lease id has no instance slot, so exactly one service looks after
them: the one holding slot 0, at its start, once its own and the dead slots' leases are
reaped (:func:`services.lifecycle.startup.reap.reap_at_start`), before it serves. Slot 0's
lock makes that one process at a time; any other slot's service never reads them.

1. Every ``*.jsonl`` file in ``<lifecycle state dir>/legacy/`` is read
   (:mod:`services.lifecycle.reaping.legacy_files`); a refused one (malformed, or writable by
   someone else) is logged and left where it is.
2. Each file's records go into ``legacy_records`` (:mod:`services.lifecycle.reaping.legacy_table`)
   in one transaction, then the file is renamed ``<name>.imported``. The rows are keyed
   by the file's digest and line: a file imported again (a crash before the rename, the
   same file dropped twice) adds nothing.
3. Every pending record goes through :meth:`~services.lifecycle.reaping.reaper.Reaper.close_legacy`,
   one after another, and its end — closed, lost or left, the reason, the PIDs — is
   stored before the next. An ended record is never looked at again, so nothing is
   signalled twice on its account; one whose processing failed stays pending for the
   next start.

Nothing here stops the service from starting: every failure is logged.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from services.common.logs import get_logger
from services.lifecycle.reaping.legacy import ENDED_LEGACY_STATES, LegacyCloseResult, LegacyState
from services.lifecycle.reaping.legacy_files import LEGACY_DIR_NAME, mark_imported, read_legacy_dir
from services.lifecycle.reaping.legacy_table import LegacyRow, LegacyStore
from services.lifecycle.reaping.reaper import now_ms

if TYPE_CHECKING:  # the startup reap calls in here; this module only reads the controller
    from services.lifecycle.controller import LifecycleController

__all__ = ["LEGACY_SLOT", "reap_legacy"]

log = get_logger("lifecycle.legacy")

#: The slot whose holder imports and reaps legacy records.
LEGACY_SLOT = 0


async def reap_legacy(controller: LifecycleController) -> list[LegacyCloseResult]:
    """Import the record files waiting, then reap every pending record; the results.

    Nothing (no file read, no table opened) unless ``controller`` holds slot 0 and
    the legacy directory exists.
    """
    if controller.slot is None or controller.slot.number != LEGACY_SLOT:
        return []
    directory = controller.state_dir / LEGACY_DIR_NAME
    if not await asyncio.to_thread(os.path.lexists, directory):
        return []
    files, refused = await asyncio.to_thread(read_legacy_dir, directory)
    for bad in refused:  # the reason names a line and a rule, never the content
        log.warning("legacy_file_refused", file=str(bad.path), why=bad.why)
    store = await LegacyStore.open(controller.store.path)
    try:
        for file in files:
            added = await store.import_file(file, now_ms())
            try:
                await asyncio.to_thread(mark_imported, file.path)
            except OSError as exc:  # its rows are in: importing it again adds nothing
                log.warning("legacy_file_not_renamed", file=str(file.path),
                            why=exc.strerror or str(exc))
            log.info("legacy_file_imported", file=str(file.path), records=len(file.records),
                     new=added)
        results = [await _reap_one(controller, store, row)
                   for row in await store.list(states=(LegacyState.PENDING,))]
    finally:
        await store.close()
    done = [r for r in results if r is not None]
    log.info("legacy_reap", files=len(files), refused=len(refused),
             failed=len(results) - len(done),
             **{str(s): sum(r.state == s for r in done) for s in ENDED_LEGACY_STATES})
    return done


async def _reap_one(controller: LifecycleController, store: LegacyStore,
                    row: LegacyRow) -> LegacyCloseResult | None:
    """Reap one pending record and store its end; None when that failed (left pending)."""
    try:
        result = await controller.reaper.close_legacy(row.record(), protect=os.getpid())
        await store.finish(row, result, now_ms())
    except Exception as exc:  # this record stays pending; the others go on
        log.error("legacy_record_failed", record_id=row.record_id, file=row.source,
                  line=row.line, why=f"{type(exc).__name__}: {exc}")
        return None
    log.info("legacy_record", record_id=row.record_id, file=row.source, line=row.line,
             record_pid=row.pid, state=str(result.state), why=result.unverified_reason,
             terminated=list(result.terminated_pids), surviving=list(result.surviving_pids))
    return result
