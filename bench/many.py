"""Report rows #4, larger: 200 sessions streaming at once through the gateway, and the
edge's memory.

One WebSocket connection per session, the sessions opened a batch at a time
(cold spawns: this row is about holding many sessions, not starting them),
then every session prompted at the same moment for a few rounds while the
edge's resident memory is sampled every 0.25 s.
"""

from __future__ import annotations

import asyncio

from bench.concurrency import RssSampler, _round, _tree_rss
from bench.relay import LABELS, WS, initialize, new_session
from bench.sizes import Sizes
from bench.stage import Serve, Stage
from bench.stats import Dist, Row
from bench.transports import Endpoint

#: Sessions opened at once while the 200 come up (spawns are CPU-bound on 2 cores).
OPEN_BATCH = 25


async def run_many(st: Stage, serve: Serve, token: str, sizes: Sizes) -> list[Row]:
    """The edge RSS row for ``sizes.many_sessions`` sessions streaming."""
    count = sizes.many_sessions
    edge_idle = (await asyncio.to_thread(_tree_rss, serve))[0]
    sampler = RssSampler(serve)
    endpoints: list[Endpoint] = []
    sids: list[str] = []
    rates: list[float] = []
    try:
        for start in range(0, count, OPEN_BATCH):
            batch = list(await asyncio.gather(
                *(st.ws(token) for _ in range(min(OPEN_BATCH, count - start)))))
            endpoints += batch
            await asyncio.gather(*(initialize(ep.peer) for ep in batch))
            sids += await asyncio.gather(*(new_session(ep.peer, st.workspace) for ep in batch))
        sampler.start()
        for _ in range(sizes.concurrent_rounds):
            rates.append(await _round(endpoints, sids, sizes.concurrent_n))
        await sampler.sample()
    finally:
        await sampler.stop()
        await asyncio.gather(*(ep.close() for ep in endpoints), return_exceptions=True)
    edge = Dist.of(sampler.edge)
    peak = max(sampler.edge) if sampler.edge else float("nan")
    agg = Dist.of(rates, higher_is_better=True)
    return [Row("4", f"edge RSS with {count} sessions streaming (samples every 0.25 s)", "MB",
                edge, "edge RSS of the fresh gateway, no session yet",
                Dist(edge_idle, edge_idle, 1), "≤ 150 MB", peak <= 150.0,
                f"peak {peak:.1f} MB; {sizes.concurrent_n} updates per session per round, "
                f"{sizes.concurrent_rounds} rounds, aggregate {agg.median:,.0f} updates/s "
                f"through the {LABELS[WS]}")]
