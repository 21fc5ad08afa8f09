"""Report rows #5 and #6 on PostgreSQL: the same load and AppendTurn runs on the shared store.

A throwaway PostgreSQL cluster (:mod:`tests.pg_cluster`, the one the tests
use) with the server's default durability — ``fsync`` and
``synchronous_commit`` on, so every AppendTurn waits for its WAL flush —
reached over its unix socket; the stage's ``[store] url`` names one database
in it, and :mod:`bench.store_bench` runs its rows there, named ", PostgreSQL
store". Without the server binaries the rows are left out and the results
page says why.
"""

from __future__ import annotations

import asyncio

from bench.sizes import Sizes
from bench.stage import stage
from bench.stats import Row
from bench.store_bench import run_append, run_load
from tests.pg_cluster import missing_reason, running_cluster

__all__ = ["run_postgres"]

#: Server settings of the benchmark cluster: PostgreSQL's defaults, connections aside.
BENCH_SETTINGS = ("max_connections=100",)
BENCH_DATABASE = "acpgate_bench"


async def run_postgres(sizes: Sizes, skipped: list[str]) -> list[Row]:
    """The PostgreSQL rows #5 and #6 (none, with the reason in ``skipped``, when
    the server binaries are absent)."""
    reason = missing_reason()
    if reason:
        skipped.append(f"PostgreSQL rows (items 5, 6): {reason}")
        return []
    with running_cluster(BENCH_SETTINGS) as cluster:
        await asyncio.to_thread(cluster.create_database, BENCH_DATABASE)
        async with stage(store_url=cluster.dsn(BENCH_DATABASE)) as st:
            rows = await run_load(st, sizes, backend="PostgreSQL")
            rows += await run_append(st, sizes, backend="PostgreSQL")
    note = "PostgreSQL 15, default durability (fsync, synchronous_commit on), unix socket"
    return [Row(r.item, r.measure, r.unit, r.value, r.baseline_label, r.baseline, r.target,
                r.met, f"{r.note}; {note}" if r.note else note) for r in rows]
