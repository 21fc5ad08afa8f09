"""How evenly ``[gateway] workers`` edge processes share a burst of connections.

A fresh ``acpgate serve`` with 2, then 4 edge workers; the moment ``/healthz``
answers 200, one WebSocket to the last worker (``?worker=N``: is it serving
already?) and then rounds of a burst of connections (200 in the full run) opened
at once and held, counted per worker by ``/metrics``
(``acpgate_worker_connections{worker="k"}``), then closed. The row: the largest
deviation of a worker's count from the even share, in percent, per round; target
±20 %. The first round starts right after ``/healthz`` said 200, the others on a
warmed-up gateway. Then as many rounds again with one worker stopped
(``SIGSTOP``) for ``hold_secs`` (``Sizes.spread_hold_secs``) just after
the burst starts — a loop a busy host holds off the CPU — in a row of their own:
the spread must hold then too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Sequence

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from bench.stage import Serve, serve, stage
from bench.stats import Dist, Row

__all__ = ["run_spread"]

#: Target: every worker within this many percent of the even share.
TARGET_PCT = 20.0
#: How soon after a held-up round's burst starts its worker is stopped.
_HOLD_AFTER_SECS = 0.05
_GAUGE = re.compile(r'^acpgate_worker_connections\{worker="(\d+)"\} (\d+)', re.MULTILINE)


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                     .encode())
        raw = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, body = raw.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split(" ")[1]), body


async def per_worker(port: int) -> dict[int, int]:
    """Worker → open connections, as ``/metrics`` shows them."""
    _, body = await _get(port, "/metrics")
    return {int(k): int(v) for k, v in _GAUGE.findall(body)}


async def _counted(port: int, total: int, workers: int, within: float = 60.0) -> dict[int, int]:
    """``/metrics``' per-worker counts once they add up to ``total`` over every worker
    (the workers report every half second)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    counts: dict[int, int] = {}
    while loop.time() < deadline:
        counts = await per_worker(port)
        if len(counts) == workers and sum(counts.values()) == total:
            return counts
        await asyncio.sleep(0.2)
    raise RuntimeError(f"/metrics never counted {total} connections: {counts}")


async def _dial(url: str, token: str) -> ClientConnection:
    return await connect(url, proxy=None, open_timeout=60, ping_interval=None,
                         additional_headers={"Authorization": f"Bearer {token}"})


def deviation_pct(counts: dict[int, int], workers: int) -> float:
    """The largest distance of a worker's count from the even share, in percent of it."""
    share = sum(counts.values()) / workers
    return max(abs(counts.get(n, 0) - share) for n in range(1, workers + 1)) / share * 100


async def _round(port: int, url: str, token: str, size: int, workers: int) -> dict[int, int]:
    conns = await asyncio.gather(*(_dial(url, token) for _ in range(size)))
    try:
        return await _counted(port, size, workers)
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
        await _counted(port, 0, workers)


def _worker_of(argv: list[str]) -> int:
    """The ``--worker N`` of an edge's command line (0: none)."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--worker" and value.isdigit():
            return int(value)
    return 0


async def _held_up_round(sv: Serve, port: int, url: str, token: str, size: int,
                         workers: int, hold_secs: float) -> dict[int, int]:
    """A round during which edge worker ``workers`` is stopped for ``hold_secs``."""
    edge = next(proc for kind, proc in sv.all_children()
                if kind == "edge" and _worker_of(proc.cmdline()) == workers)

    async def hold() -> None:
        await asyncio.sleep(_HOLD_AFTER_SECS)
        edge.suspend()
        try:
            await asyncio.sleep(hold_secs)
        finally:
            edge.resume()

    holding = asyncio.create_task(hold())
    try:
        return await _round(port, url, token, size, workers)
    finally:
        await holding


def _row(workers: int, size: int, samples: list[dict[int, int]], what: str,
         note: str) -> Row:
    devs = [deviation_pct(c, workers) for c in samples]
    shown = "; ".join("/".join(str(c.get(n, 0)) for n in range(1, workers + 1)) for c in samples)
    return Row(
        "8", f"connection spread, {size} WebSocket connections at once over `workers = {workers}`"
             f"{what} (largest deviation from the even share)", "%", Dist.of(devs), "—", None,
        target=f"≤ {TARGET_PCT:.0f} %", met=max(devs) <= TARGET_PCT,
        note=f"per worker, each round: {shown} (even share {size / workers:g}){note}")


async def spread_rows(workers: int, size: int, rounds: int,
                      hold_secs: float) -> list[Row]:
    """The rows of one gateway with ``workers`` edge workers."""
    async with stage(max_sessions=size + 8, warm=0) as st:
        st.env["ACPGATE_gateway__workers"] = str(workers)
        token = st.mint_token()
        async with serve(st) as sv:  # returns the moment /healthz answers 200
            try:
                early = await _dial(f"{st.ws_url}?worker={workers}", token)
                await early.close()
                early_status = 101
            except InvalidStatus as exc:
                early_status = exc.response.status_code
            samples = [await _round(st.port, st.ws_url, token, size, workers)
                       for _ in range(rounds)]
            held = [await _held_up_round(sv, st.port, st.ws_url, token, size, workers, hold_secs)
                    for _ in range(rounds)]
    return [
        _row(workers, size, samples, "",
             f"; the first round starts the moment /healthz answers 200, when "
             f"`?worker={workers}` got {early_status}"),
        _row(workers, size, held, f", worker {workers} stopped {hold_secs:g} s mid-burst",
             f"; worker {workers} stopped (SIGSTOP) {_HOLD_AFTER_SECS * 1000:g} ms after "
             f"the burst starts, for {hold_secs:g} s: a loop a busy host holds off the CPU"),
    ]


async def run_spread(size: int, rounds: int, hold_secs: float,
                     worker_counts: Sequence[int] = (2, 4)) -> list[Row]:
    """The spread rows for each of ``worker_counts`` (one worker stopped ``hold_secs`` in
    the held-up rounds)."""
    rows: list[Row] = []
    for workers in worker_counts:
        rows += await spread_rows(workers, size, rounds, hold_secs)
    return rows
