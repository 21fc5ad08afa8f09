"""Warm pools in the benchmarks: wait until a pool holds its adapters, read from the lease store.

The bench reads ``<data dir>/lifecycle/leases.db`` (read-only, WAL) to know that
a pool "has one" before it times a warm ``session/new``, for ``acpgate acp``
and ``acpgate serve`` alike (the embedded lifecycle service has no socket the
bench could ask).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from bench.stage import WARM_ALIAS


def _ready(db: Path, alias: str) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute(
            "SELECT count(*) FROM leases WHERE state = 'warm' AND session_key = ?"
            " AND adapter_pid > 0", (f"agent:{alias}:warm",)).fetchone()
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        conn.close()
    return int(row[0])


async def wait_warm(data_dir: Path, n: int, *, alias: str = WARM_ALIAS,
                    within: float = 60.0) -> None:
    """Return once ``alias``'s pool under ``data_dir`` has ``n`` adapters ready."""
    db = data_dir / "lifecycle" / "leases.db"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await asyncio.to_thread(_ready, db, alias) < n:
        if loop.time() > deadline:
            raise RuntimeError(f"the warm pool of {alias} did not reach {n} within {within}s")
        await asyncio.sleep(0.02)
