"""A long-running service process's garbage-collector settings: fewer, cheaper collections.

:func:`tune_gc` is called once, after startup, by the process's entry point —
`acpgate acp`, each gateway edge worker, the session service; it changes process-wide
state, so nothing that runs inside another process (a test, an embedding) calls it.
"""

from __future__ import annotations

import gc

__all__ = ["GC_GEN0_THRESHOLD", "GC_OLDER_THRESHOLD", "tune_gc"]

#: Allocations between young-generation collections (CPython default 700).
GC_GEN0_THRESHOLD = 20_000
#: Young collections per older-generation collection (CPython default 10).
GC_OLDER_THRESHOLD = 20


def tune_gc() -> None:
    """Collect less often: this process serves and nothing else.

    Each relayed update allocates a handful of dicts (parse, rewrite, encode), so the
    default gen-0 threshold (700) ran a collection every ~100 updates, each also paying
    for every object the runtime holds. The objects alive after startup (modules, gRPC,
    the runtime) are moved out of the collector's sight with ``gc.freeze``, and young
    collections run every :data:`GC_GEN0_THRESHOLD` allocations. In a gateway with many
    sessions streaming, the default thresholds also ran a full collection every few
    seconds (each replay ring's events live long enough to reach the oldest generation),
    a pause of tens of milliseconds over every session's objects on the relay's loop
    (and the session service's, between the event log's commits);
    now one comes after :data:`GC_OLDER_THRESHOLD` squared young collections at the
    soonest (by default after 100 of 700 allocations each). Cycles are still collected;
    memory stays bounded (a few MB of young objects at most).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, GC_OLDER_THRESHOLD, GC_OLDER_THRESHOLD)
