"""Report rows #1–#3: relay throughput, relay latency, cold ``session/new``.

Three paths to the same firehose adapter script, measured in interleaved
rounds so that background load on the (shared) machine hits all of them alike:

- ``direct``: the bench client reads the adapter over its stdio;
- ``acp``: through ``acpgate acp`` (stdio front door, embedded services);
- ``ws``: through the gateway (``acpgate serve``, WebSocket, minted token).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.peer import Peer, StreamSink
from bench.sizes import Sizes
from bench.stage import WARM_ALIAS, Stage
from bench.stats import Dist, Row
from bench.transports import Endpoint
from bench.warm import wait_warm
from services.common.protocol import M_INITIALIZE, M_SESSION_CLOSE, M_SESSION_NEW

DIRECT, ACP, WS, BARE_WS, BARE_PICOWS = "direct", "acp", "ws", "bare_ws", "bare_picows"
ACP_WARM, WS_WARM = "acp_warm", "ws_warm"
#: A v2 client of ``acpgate acp`` on the same (v1) firehose agent: every update translated.
ACP_V2 = "acp_v2"
LABELS = {DIRECT: "direct stdio (baseline)", ACP: "`acpgate acp` (stdio)",
          ACP_V2: "`acpgate acp` (stdio), ACP v2 client on the v1 agent (translated)",
          WS: "gateway (WebSocket)",
          BARE_WS: "firehose served over bare WebSocket, no edge (transport ceiling)",
          BARE_PICOWS: "firehose served over bare picows, no edge (the other library's ceiling)"}
WAIT_SECS = 300.0


async def initialize(peer: Peer, version: int = 1) -> None:
    """``initialize`` as an editor would send it (a v2 one: ``info`` instead of v1's
    capabilities)."""
    if version == 2:
        await peer.request(M_INITIALIZE, {"protocolVersion": 2,
                                          "info": {"name": "bench", "version": "1"}})
        peer.version = 2
        return
    await peer.request(M_INITIALIZE, {"protocolVersion": 1, "clientCapabilities": {}})


async def new_session(peer: Peer, cwd: Path, alias: str = "") -> str:
    """``session/new`` (of ``alias``, else the default agent); returns the session id."""
    params: dict[str, object] = {"cwd": str(cwd), "mcpServers": []}
    if alias:
        params["agentAlias"] = alias
    result = await peer.request(M_SESSION_NEW, params)
    return str(result["sessionId"])


async def open_session(ep: Endpoint, cwd: Path, version: int = 1) -> str:
    """``initialize`` (of ``version``) + ``session/new``."""
    await initialize(ep.peer, version)
    return await new_session(ep.peer, cwd)


async def throughput_round(peer: Peer, sid: str, n: int) -> float:
    """One ``firehose n`` prompt; updates/s from the prompt to the last update."""
    sink = peer.sink(sid)
    sink.reset(n)
    t0 = time.monotonic_ns()
    await peer.prompt(sid, f"firehose {n}", WAIT_SECS)
    await asyncio.wait_for(sink.done.wait(), WAIT_SECS)
    rate = n / ((max(sink.last_ns, time.monotonic_ns()) - t0) / 1e9)
    await _turn_over(peer, sink)
    return rate


async def _turn_over(peer: Peer, sink: StreamSink) -> None:
    """A v2 prompt is answered at once: wait for the turn's end (its idle ``state_update``),
    as a v1 prompt's answer does, before the next round starts."""
    if peer.version == 2:
        await asyncio.wait_for(sink.idle.wait(), WAIT_SECS)


async def latency_round(peer: Peer, sid: str, n: int, pace_ms: float) -> list[float]:
    """One paced prompt; the adapter-write → client-read latency of each update (ms)."""
    sink = peer.sink(sid)
    sink.reset(n, keep_latency=True)
    await peer.prompt(sid, f"pace {n} {pace_ms}", WAIT_SECS)
    await asyncio.wait_for(sink.done.wait(), WAIT_SECS)
    await _turn_over(peer, sink)
    return [ns / 1e6 for ns in sink.latencies_ns]


async def run_relay(st: Stage, token: str, sizes: Sizes) -> list[Row]:
    """Rows #1 and #2, all three paths open at once, rounds interleaved."""
    cwd = st.workspace
    endpoints = {DIRECT: await st.adapter(), ACP: await st.acp(), ACP_V2: await st.acp(),
                 WS: await st.ws(token),
                 BARE_WS: await st.ws_firehose(),
                 BARE_PICOWS: await st.ws_firehose(module="bench.ws_firehose_picows")}
    try:
        sids = {k: await open_session(ep, cwd, 2 if k == ACP_V2 else 1)
                for k, ep in endpoints.items()}
        for k, ep in endpoints.items():  # warm-up: imports, JIT-less caches, pipe buffers
            await throughput_round(ep.peer, sids[k], min(sizes.throughput_n, 1000))
        counts = (sizes.throughput_small_n, sizes.throughput_n)
        rates: dict[tuple[str, int], list[float]] = {(k, n): [] for k in endpoints for n in counts}
        order = list(endpoints.items())
        for r in range(sizes.throughput_rounds):
            # Alternate the paths' order each round: on 2 cores whichever runs first after
            # another path's burst pays for its leftovers (GC, page cache, scheduler).
            for n in counts:
                for k, ep in (order if r % 2 == 0 else order[::-1]):
                    rates[k, n].append(await throughput_round(ep.peer, sids[k], n))
        lat: dict[str, list[float]] = {k: [] for k in endpoints}
        for _ in range(sizes.latency_rounds):
            for k, ep in endpoints.items():
                lat[k] += await latency_round(ep.peer, sids[k], sizes.latency_n,
                                              sizes.latency_pace_ms)
    finally:
        for ep in endpoints.values():
            await ep.close()
    rows: list[Row] = []
    for n in counts:
        base_rate = Dist.of(rates[DIRECT, n], higher_is_better=True)
        ceiling = Dist.of(rates[BARE_WS, n], higher_is_better=True)
        note = f"{n:,} updates per prompt, {sizes.throughput_rounds} prompts"
        d = Dist.of(rates[ACP, n], higher_is_better=True)
        rows.append(Row("1", f"relay throughput, {LABELS[ACP]}, {n:,} updates/prompt",
                        "updates/s", d, LABELS[DIRECT], base_rate, "≥ 0.6× of direct",
                        d.median >= 0.6 * base_rate.median, note))
        v1_rate = d
        d = Dist.of(rates[ACP_V2, n], higher_is_better=True)
        rows.append(Row("1", f"relay throughput, {LABELS[ACP_V2]}, {n:,} updates/prompt",
                        "updates/s", d, f"{LABELS[ACP]}, v1 client", v1_rate,
                        "≥ 0.9× of the v1 relay", d.median >= 0.9 * v1_rate.median,
                        f"{note}; {d.median / base_rate.median:.2f}× of direct stdio"))
        # One JSON-RPC message per text frame (SPEC §11): the gateway is measured against
        # the same firehose served over a bare server of the same WebSocket library.
        d = Dist.of(rates[WS, n], higher_is_better=True)
        rows.append(Row("1", f"relay throughput, {LABELS[WS]}, {n:,} updates/prompt",
                        "updates/s", d, f"bare-WebSocket ceiling, {n:,} updates/prompt", ceiling,
                        "≥ 0.9× of the ceiling", d.median >= 0.9 * ceiling.median,
                        f"{note}; {d.median / base_rate.median:.2f}× of direct stdio"))
        rows.append(Row("1", f"reference: {LABELS[BARE_WS]}, {n:,} updates/prompt", "updates/s",
                        ceiling, LABELS[DIRECT], base_rate,
                        note="same client, one text frame per update, websockets, no compression "
                        "(the gateway's default)"))
        picows = Dist.of(rates[BARE_PICOWS, n], higher_is_better=True)
        rows.append(Row("1", f"reference: {LABELS[BARE_PICOWS]}, {n:,} updates/prompt",
                        "updates/s", picows, f"bare-WebSocket ceiling (websockets), {n:,} "
                        "updates/prompt", ceiling,
                        note="same client and frames; see bench/PROFILE.md §12"))
    base_lat = Dist.of(lat[DIRECT])
    for k in (ACP, ACP_V2, WS, BARE_WS, BARE_PICOWS):
        d = Dist.of(lat[k])
        added = d.median - base_lat.median
        if k in (BARE_WS, BARE_PICOWS):
            rows.append(Row("2", f"reference: latency, {LABELS[k]}", "ms", d, LABELS[DIRECT],
                            base_lat, note=f"added p50 {added:.2f} ms"))
            continue
        limit = 0.3 if k in (ACP, ACP_V2) else 2.0
        rows.append(Row("2", f"relay latency, {LABELS[k]}", "ms", d, LABELS[DIRECT], base_lat,
                        f"added p50 ≤ {limit} ms", added <= limit,
                        f"added p50 {added:.2f} ms, added p99 {d.p99 - base_lat.p99:.2f} ms; "
                        f"{sizes.latency_n} updates/prompt, one per {sizes.latency_pace_ms} ms"))
    return rows


async def _first_chunk(peer: Peer, sid: str) -> int:
    sink = peer.sink(sid)
    sink.reset(1)
    await peer.prompt(sid, "firehose 1", WAIT_SECS)
    await asyncio.wait_for(sink.done.wait(), WAIT_SECS)
    return sink.first_ns


async def _cold_direct(st: Stage) -> tuple[float, float]:
    t0 = time.monotonic_ns()
    ep = await st.adapter()
    try:
        sid = await open_session(ep, st.workspace)
        t1 = time.monotonic_ns()
        t2 = await _first_chunk(ep.peer, sid)
    finally:
        await ep.close()
    return (t1 - t0) / 1e6, (t2 - t0) / 1e6


async def _cold_edge(ep: Endpoint, cwd: Path, alias: str = "",
                     ready: Callable[[], Awaitable[None]] | None = None) -> tuple[float, float]:
    if ready is not None:
        await ready()  # the pool has one (not timed)
    t0 = time.monotonic_ns()
    sid = await new_session(ep.peer, cwd, alias)
    t1 = time.monotonic_ns()
    t2 = await _first_chunk(ep.peer, sid)
    await ep.peer.request(M_SESSION_CLOSE, {"sessionId": sid}, WAIT_SECS)
    return (t1 - t0) / 1e6, (t2 - t0) / 1e6


#: After a pool has its adapter again: the refilled adapter's interpreter is still starting.
SETTLE_SECS = 0.3


async def _pools_settled(st: Stage) -> None:
    """Wait (untimed) until both warm pools are full again and their refills have settled,
    so no refill's spawn runs on the 2 cores during another sample."""
    await wait_warm(st.data_dir("acp"), 1)
    await wait_warm(st.data_dir("serve"), 1)
    await asyncio.sleep(SETTLE_SECS)


async def run_cold(st: Stage, token: str, sizes: Sizes) -> list[Row]:
    """Rows #3: cold and warm ``session/new`` and ``session/new`` → first chunk, vs a bare
    spawn. Every sample waits (untimed) until both pools hold an adapter again: a warm
    take's refill would otherwise spawn during the next cold sample."""
    edges = {ACP: await st.acp(), WS: await st.ws(token)}
    kinds = (DIRECT, ACP, WS, ACP_WARM, WS_WARM)
    new: dict[str, list[float]] = {k: [] for k in kinds}
    first: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        for ep in edges.values():
            await initialize(ep.peer)
        runs: dict[str, Callable[[], Awaitable[tuple[float, float]]]] = {
            DIRECT: lambda: _cold_direct(st),
            ACP: lambda: _cold_edge(edges[ACP], st.workspace),
            WS: lambda: _cold_edge(edges[WS], st.workspace),
            ACP_WARM: lambda: _cold_edge(edges[ACP], st.workspace, WARM_ALIAS,
                                         lambda: wait_warm(st.data_dir("acp"), 1)),
            WS_WARM: lambda: _cold_edge(edges[WS], st.workspace, WARM_ALIAS,
                                        lambda: wait_warm(st.data_dir("serve"), 1)),
        }
        for fn in runs.values():  # warm-up (first imports, first lease db pages)
            await fn()
        for _ in range(sizes.cold_samples):
            for k, fn in runs.items():
                await _pools_settled(st)
                a, b = await fn()
                new[k].append(a)
                first[k].append(b)
    finally:
        for ep in edges.values():
            await ep.close()
    rows: list[Row] = []
    base_new, base_first = Dist.of(new[DIRECT]), Dist.of(first[DIRECT])
    for k in (ACP, WS):
        d = Dist.of(new[k])
        rows.append(Row("3", f"cold session/new, {LABELS[k]}", "ms", d,
                        "spawn adapter + initialize + session/new, direct", base_new,
                        "p50 ≤ 300 ms", d.median <= 300.0,
                        "lease + wrapper + adapter spawn + initialize + session/new"))
    for k, cold in ((ACP_WARM, ACP), (WS_WARM, WS)):
        d = Dist.of(new[k])
        rows.append(Row("3", f"warm session/new, {LABELS[cold]}", "ms", d,
                        f"cold session/new, {LABELS[cold]}", Dist.of(new[cold]),
                        "p50 ≤ 10 ms", d.median <= 10.0,
                        "the pool has one: lease take + attach + initialize + session/new"))
    for k in (ACP, WS):
        d = Dist.of(first[k])
        rows.append(Row("3", f"session/new → first chunk, {LABELS[k]}", "ms", d,
                        "spawn → first chunk, direct", base_first))
    return rows
