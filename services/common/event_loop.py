"""Which asyncio event loop each acpgate process runs on.

uvloop (a Linux dependency) replaces the standard loop only in the processes
where ``bench/PROFILE.md`` measured a win, listed in :data:`UVLOOP_BY_DEFAULT`;
the others keep the standard loop, and so does every process when uvloop is not
installed. ``ACPGATE_EVENT_LOOP`` overrides the choice, which is how the
measurement was taken and how a loop is ruled out while diagnosing:
``uvloop`` or ``asyncio`` for every process, or per process, e.g.
``edge=uvloop,lifecycle=asyncio`` (names from :data:`PROCESSES`). An unknown
value is ignored with a warning; the process never fails to start over it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from services.common.logs import get_logger

_log = get_logger("event_loop")

T = TypeVar("T")

ENV_EVENT_LOOP = "ACPGATE_EVENT_LOOP"
UVLOOP = "uvloop"
ASYNCIO = "asyncio"
LOOPS = (UVLOOP, ASYNCIO)

#: The processes that pick a loop: ``acpgate acp`` (edge and services in one
#: process), the three services, the built-in agent and the stdio bridge.
#: ``acpgate serve`` is not one of them: it only supervises, and it starts its
#: children in their own process group, which uvloop's ``subprocess_exec``
#: does not offer (no ``process_group``).
PROCESSES = ("acp", "edge", "session", "lifecycle", "agent", "bridge")

#: Where uvloop won its measurement (bench/PROFILE.md): the edge
#: (gateway relay rate +27–31 %), the session service (CPU per turn −10–14 %)
#: and the built-in agent (CPU per turn −12–15 %). ``acpgate acp`` (+15–21 %
#: CPU per relayed update) and the lifecycle service (+50 %) lost and keep the
#: standard loop; the bridge was not measured.
UVLOOP_BY_DEFAULT: frozenset[str] = frozenset({"edge", "session", "agent"})


def choose(process: str, environ: Mapping[str, str] | None = None) -> str:
    """The loop ``process`` should run on: :data:`UVLOOP` or :data:`ASYNCIO`.

    ``ACPGATE_EVENT_LOOP`` first (a per-process entry beats a bare value),
    then :data:`UVLOOP_BY_DEFAULT`. Whether uvloop is importable is not
    checked here; :func:`loop_factory` falls back.
    """
    if process not in PROCESSES:
        return ASYNCIO
    env = os.environ if environ is None else environ
    chosen = UVLOOP if process in UVLOOP_BY_DEFAULT else ASYNCIO
    for entry in (part.strip() for part in env.get(ENV_EVENT_LOOP, "").split(",")):
        if not entry:
            continue
        name, sep, value = entry.rpartition("=")
        if sep and name.strip() != process:
            continue
        value = value.strip().lower()
        if value not in LOOPS:
            _log.warning("event_loop_unknown", value=value, known=list(LOOPS))
            continue
        chosen = value
        if sep:  # a per-process entry is final
            break
    return chosen


def loop_factory(process: str, environ: Mapping[str, str] | None = None,
                 ) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``uvloop.new_event_loop`` when ``process`` runs on uvloop and it imports, else None
    (the standard loop)."""
    if choose(process, environ) != UVLOOP:
        return None
    try:
        import uvloop
    except ImportError:  # not installed (not Linux/macOS, or a minimal install)
        _log.info("uvloop_unavailable", process=process)
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], *, process: str) -> T:
    """``asyncio.run(main)`` on the loop :func:`choose` picks for ``process``."""
    with asyncio.Runner(loop_factory=loop_factory(process)) as runner:
        return runner.run(main)
