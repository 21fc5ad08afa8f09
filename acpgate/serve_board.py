"""serve's side of the edge workers' board (:mod:`services.common.worker_board`).

With ``[gateway] workers`` above one, serve makes the board before any child runs
and hands it to every edge worker (``--board-fd``), clears a worker's slot when
the worker exits, and logs ``serve_ready`` only once every worker's slot says it
serves — written by the very process serve runs as that worker now, so a
predecessor's slot never counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from acpgate.serve_children import ChildSpec
from services.common.logs import get_logger
from services.common.worker_board import WorkerBoard

__all__ = ["board_for", "workers_serving"]

log = get_logger("serve")

#: How often serve looks at the board while it waits.
_LOOK_SECS: Final = 0.05


def board_for(specs: Sequence[ChildSpec]) -> WorkerBoard | None:
    """A board for the edge workers among ``specs`` (None: one edge, nothing to share)."""
    workers = [spec.worker for spec in specs if spec.worker]
    return WorkerBoard.create(max(workers)) if workers else None


def waiting_for(board: WorkerBoard, pids: Mapping[int, int]) -> list[int]:
    """The workers whose slot does not (yet) say that the process ``pids`` names serves."""
    return [slot.worker for slot in board.slots()
            if not (slot.serving and slot.pid and slot.pid == pids.get(slot.worker))]


async def workers_serving(board: WorkerBoard, pids: Callable[[], Mapping[int, int]],
                          warn_after: float) -> None:
    """Return once every worker serves (``pids``: worker → the PID serve runs it as now);
    what it still waits for is logged once after ``warn_after`` seconds."""
    started = time.monotonic()
    warned = False
    while waiting := waiting_for(board, pids()):
        if not warned and time.monotonic() - started >= warn_after:
            log.warning("serve_waiting_for_workers", workers=waiting)
            warned = True
        await asyncio.sleep(_LOOK_SECS)
    log.info("serve_workers_serving", workers=board.workers)
