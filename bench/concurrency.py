"""Report rows #4: 50 concurrent sessions streaming at once.

Through the gateway: one WebSocket connection per session (50 clients); first
50 concurrent cold ``session/new``, closed again, then 50 concurrent ones that
take the warm pool's adapters (the pool holds 50); every session prompted at the
same moment; aggregate updates/s is all updates over
the wall time of the round. Baseline: 50 firehose adapters read directly by
the same client process. Resident memory is sampled (psutil, off the event
loop) while the rounds run: the edge process, and each adapter and wrapper
under the lifecycle service.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import psutil

from bench.peer import Peer
from bench.relay import LABELS, WS, initialize, new_session, open_session
from bench.sizes import Sizes
from bench.stage import ALIAS, FIREHOSE, WARM_ALIAS, Serve, Stage
from bench.stats import Dist, Row
from bench.transports import Endpoint
from bench.warm import wait_warm
from services.common.protocol import M_SESSION_CLOSE

MB = 1024 * 1024


def _tree_rss(serve: Serve) -> tuple[float, list[float], list[float]]:
    """(edge RSS, adapter RSS list, wrapper RSS list) in MB, right now."""
    kids = serve.children()
    edge = kids.get("edge")
    edge_rss = edge.memory_info().rss / MB if edge is not None else float("nan")
    adapters: list[float] = []
    wrappers: list[float] = []
    lifecycle = kids.get("lifecycle")
    if lifecycle is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in lifecycle.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    cmd = proc.cmdline()
                    rss = proc.memory_info().rss / MB
                    if any("wrapper" in part for part in cmd[:4]):
                        wrappers.append(rss)
                    elif str(FIREHOSE) in cmd:
                        adapters.append(rss)
    return edge_rss, adapters, wrappers


class RssSampler:
    """Samples the serve tree every ``interval`` seconds until stopped."""

    def __init__(self, serve: Serve, interval: float = 0.25) -> None:
        self.serve = serve
        self.interval = interval
        self.edge: list[float] = []
        self.adapters: list[float] = []
        self.wrappers: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        """Take one sample now."""
        edge, adapters, wrappers = await asyncio.to_thread(_tree_rss, self.serve)
        self.edge.append(edge)
        if adapters:
            self.adapters = adapters  # the latest full set (one value per adapter)
            self.wrappers = wrappers

    async def _loop(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        """Begin sampling."""
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _round(endpoints: list[Endpoint], sids: list[str], n: int) -> float:
    for ep, sid in zip(endpoints, sids, strict=True):
        ep.peer.sink(sid).reset(n)
    t0 = time.monotonic()
    await asyncio.gather(*(ep.peer.prompt(sid, f"firehose {n}")
                           for ep, sid in zip(endpoints, sids, strict=True)))
    await asyncio.gather(*(ep.peer.sink(sid).done.wait()
                           for ep, sid in zip(endpoints, sids, strict=True)))
    return len(endpoints) * n / (time.monotonic() - t0)


async def _direct(st: Stage, sizes: Sizes) -> tuple[list[float], list[float]]:
    endpoints = list(await asyncio.gather(
        *(st.adapter() for _ in range(sizes.concurrent_sessions))))
    try:
        sids = list(await asyncio.gather(*(open_session(ep, st.workspace) for ep in endpoints)))
        await _round(endpoints, sids, min(100, sizes.concurrent_n))
        rates = [await _round(endpoints, sids, sizes.concurrent_n)
                 for _ in range(sizes.concurrent_rounds)]
        rss: list[float] = []
        for ep in endpoints:
            assert ep.proc is not None
            with contextlib.suppress(psutil.NoSuchProcess):
                rss.append(psutil.Process(ep.proc.pid).memory_info().rss / MB)
    finally:
        await asyncio.gather(*(ep.close() for ep in endpoints), return_exceptions=True)
    return rates, rss


async def _concurrent_new(endpoints: list[Endpoint], st: Stage, alias: str) -> float:
    """Seconds for one ``session/new`` of ``alias`` per endpoint, all sent at once."""
    t0 = time.monotonic()
    sids = await asyncio.gather(*(new_session(ep.peer, st.workspace, alias) for ep in endpoints))
    secs = time.monotonic() - t0
    for ep, sid in zip(endpoints, sids, strict=True):
        ep.peer.sink(sid)  # the session this endpoint streams on
    return secs


async def close_all(peer: Peer) -> None:
    """``session/close`` every session the peer has a sink for, and forget them."""
    for sid in list(peer.sinks):
        await peer.request(M_SESSION_CLOSE, {"sessionId": sid})
    peer.sinks.clear()


async def run_concurrency(st: Stage, serve: Serve, token: str, sizes: Sizes) -> list[Row]:
    """Rows #4."""
    edge_idle = (await asyncio.to_thread(_tree_rss, serve))[0]
    sampler = RssSampler(serve)
    sampler.start()
    endpoints: list[Endpoint] = []
    try:
        endpoints = list(await asyncio.gather(
            *(st.ws(token) for _ in range(sizes.concurrent_sessions))))
        await asyncio.gather(*(initialize(ep.peer) for ep in endpoints))
        cold_secs = await _concurrent_new(endpoints, st, ALIAS)
        await asyncio.gather(*(close_all(ep.peer) for ep in endpoints))
        # The warm pool holds one adapter per session about to start (it filled at start).
        await wait_warm(st.data_dir("serve"), sizes.concurrent_sessions)
        setup_secs = await _concurrent_new(endpoints, st, WARM_ALIAS)
        sids = [next(iter(ep.peer.sinks)) for ep in endpoints]
        # Let the pool refill before the streaming rounds, which it would compete with.
        await wait_warm(st.data_dir("serve"), sizes.concurrent_sessions)
        await _round(endpoints, sids, min(100, sizes.concurrent_n))
        rates = [await _round(endpoints, sids, sizes.concurrent_n)
                 for _ in range(sizes.concurrent_rounds)]
        await sampler.sample()  # one full sample with every session still open
    finally:
        await sampler.stop()
        await asyncio.gather(*(ep.close() for ep in endpoints), return_exceptions=True)
    direct_rates, direct_rss = await _direct(st, sizes)
    s = sizes.concurrent_sessions
    agg = Dist.of(rates, higher_is_better=True)
    edge = Dist.of(sampler.edge)
    edge_peak = max(sampler.edge) if sampler.edge else float("nan")
    adapters = Dist.of(sampler.adapters)
    wrappers = Dist.of(sampler.wrappers)
    base_adapter = Dist.of(direct_rss)
    return [
        Row("4", f"{s} concurrent session/new, warm pool of {s}, {LABELS[WS]}", "s",
            Dist(setup_secs, setup_secs, 1), f"{s} concurrent cold session/new",
            Dist(cold_secs, cold_secs, 1), "≤ 0.5 s", setup_secs <= 0.5,
            f"one connection per session, all sent at once; {s} warm adapters ready"),
        Row("4", f"{s} sessions streaming, aggregate, {LABELS[WS]}", "updates/s", agg,
            f"{s} adapters read directly", Dist.of(direct_rates, higher_is_better=True),
            note=f"{sizes.concurrent_n} updates per session per round"),
        Row("4", f"edge RSS with {s} sessions (samples every 0.25 s)", "MB", edge,
            "edge RSS of the fresh gateway, no session yet", Dist(edge_idle, edge_idle, 1),
            "≤ 150 MB", edge_peak <= 150.0, f"peak {edge_peak:.1f} MB; p99 column = p99 of samples"),
        Row("4", f"per-adapter RSS under acpgate ({len(sampler.adapters)} adapters)", "MB",
            adapters, "per-adapter RSS, spawned directly", base_adapter,
            note=f"plus one wrapper per adapter: median {wrappers.median:.1f} MB "
                 f"({len(sampler.wrappers)} wrappers)"),
    ]

