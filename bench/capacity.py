"""One host at capacity — N sessions streaming at 50 updates/s each.

For each N: N sessions through one ``acpgate serve`` (firehose adapter,
``pace 250 20``: 250 updates, one every 20 ms, so 50 updates/s for 5 s per
session), one WebSocket connection per session, the sessions spread over
several client processes (:mod:`bench.capacity_client`) so that no single
client loop is what limits the gateway; then the same N adapters read directly
by the same number of client processes. Every session is prompted at the same
moment. Reported per path: delivered updates/s (all updates over the time from
the prompt to the last update), the p50/p99 relay latency of every update
(adapter write → client read), and the CPU each process used over that window
(edge, lifecycle service, session service, clients, adapters, wrappers; a sum
over the processes of a kind, 100 % = one core).

On a 2-core machine the clients, the adapters and acpgate share both cores,
so the ratio to direct is what counts there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

from bench.stage import FIREHOSE, REPO, Serve, child_env, serve, stage
from bench.stats import Dist, Row, fmt, percentile

#: The kinds of process whose CPU is reported, in table order.
KINDS = ("edge", "lifecycle", "session", "clients", "adapters", "wrappers")
#: Most client processes (a 16-core run used 12).
MAX_CLIENTS = 12


@dataclass(frozen=True)
class Workload:
    """What each session streams, and how the sessions are spread."""

    sessions: int
    updates: int = 250
    pace_ms: float = 20.0
    clients: int = 2

    @property
    def prompt(self) -> str:
        """The firehose prompt of one session."""
        return f"pace {self.updates} {self.pace_ms:g}"

    @property
    def stream_secs(self) -> float:
        """How long one session's stream lasts at its pace."""
        return self.updates * self.pace_ms / 1000.0


@dataclass
class Measurement:
    """One path at one N."""

    path: str
    sessions: int
    delivered: int
    expected: int
    seconds: float
    latencies_ms: list[float]
    errors: int
    cpu: dict[str, float] = field(default_factory=dict)
    #: How many processes of each kind were metered.
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Delivered updates per second over the window."""
        return self.delivered / self.seconds if self.seconds > 0 else math.nan

    @property
    def p50(self) -> float:
        """Median relay latency (ms)."""
        return percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        """99th-percentile relay latency (ms)."""
        return percentile(self.latencies_ms, 99)


def default_clients() -> int:
    """Client processes for this machine: about three per four cores, 2 to 12."""
    return max(2, min(MAX_CLIENTS, (os.cpu_count() or 2) * 3 // 4))


def raise_fd_limit() -> None:
    """The soft open-files limit up to the hard one (thousands of connections and pipes);
    acpgate serve and the clients inherit it."""
    with contextlib.suppress(ValueError, OSError):
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Client:
    """One :mod:`bench.capacity_client` process."""

    def __init__(self, proc: asyncio.subprocess.Process, count: int) -> None:
        self.proc = proc
        self.count = count

    @classmethod
    async def start(cls, argv: Sequence[str], count: int) -> Client:
        """Start a client (its stderr goes to the benchmark's)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.capacity_client", *argv, cwd=str(REPO),
            env=child_env(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            limit=256 * 1024 * 1024)
        return cls(proc, count)

    async def _read(self, within: float) -> dict[str, object]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), within)
        if not line:
            raise RuntimeError(f"capacity client exited (code {await self.proc.wait()})")
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    def _send(self, message: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    async def ready(self, within: float) -> None:
        """Wait until every session of this client is open."""
        await self._read(within)

    async def go(self, work: Workload, within: float) -> dict[str, object]:
        """Prompt every session; what arrived."""
        self._send({"go": work.prompt, "expect": work.updates, "wait": within})
        return await self._read(within + 30.0)

    async def close(self) -> None:
        """Tell it to close its sessions, and wait for it (killed after a while)."""
        if self.proc.returncode is None:
            with contextlib.suppress(Exception):
                self._send({"close": True})
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 120)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def _shares(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _kind_of(proc: psutil.Process) -> str:
    """``adapters`` or ``wrappers`` for a process under the lifecycle service or a client."""
    try:
        cmd = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""
    if any("wrapper" in part for part in cmd[:4]):
        return "wrappers"
    return "adapters" if str(FIREHOSE) in cmd else ""


def _processes(sv: Serve | None, clients: Sequence[Client]) -> dict[str, list[psutil.Process]]:
    """Every process to meter, by kind."""
    out: dict[str, list[psutil.Process]] = {kind: [] for kind in KINDS}
    roots: list[psutil.Process] = []
    for client in clients:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(client.proc.pid)
            out["clients"].append(proc)
            roots.append(proc)
    if sv is not None:
        for name, child in sv.all_children():
            out[name].append(child)
            if name == "lifecycle":
                roots.append(child)
    for root in roots:
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in root.children(recursive=True):
                kind = _kind_of(proc)
                if kind:
                    out[kind].append(proc)
    return out


def _cpu_secs(procs: dict[str, list[psutil.Process]]) -> dict[tuple[str, int], float]:
    out: dict[tuple[str, int], float] = {}
    for kind, group in procs.items():
        for proc in group:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                out[(kind, proc.pid)] = times.user + times.system
    return out


def _cpu_percent(before: dict[tuple[str, int], float], after: dict[tuple[str, int], float],
                 wall: float) -> dict[str, float]:
    out = dict.fromkeys(KINDS, 0.0)
    for key, end in after.items():
        start = before.get(key)
        if start is not None:
            out[key[0]] += (end - start) / wall * 100.0
    return out


async def measure(path: str, work: Workload, argv: Sequence[str], sv: Serve | None) -> Measurement:
    """Run ``work`` once over ``path`` (``gateway``: ``argv`` dials it; ``direct``)."""
    shares = _shares(work.sessions, work.clients)
    clients = [await Client.start([*argv[:1], str(n), *argv[1:]], n) for n in shares]
    try:
        await asyncio.gather(*(c.ready(60.0 + 1.0 * c.count) for c in clients))
        procs = await asyncio.to_thread(_processes, sv, clients)
        before = await asyncio.to_thread(_cpu_secs, procs)
        t0_wall, t0_ns = time.monotonic(), time.monotonic_ns()
        within = work.stream_secs * 4 + 60.0
        results = await asyncio.gather(*(c.go(work, within) for c in clients))
        after = await asyncio.to_thread(_cpu_secs, procs)
        wall = time.monotonic() - t0_wall
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    last_ns = max(int(r["last_ns"]) for r in results)  # type: ignore[call-overload]
    return Measurement(
        path=path, sessions=work.sessions,
        delivered=sum(int(r["updates"]) for r in results),  # type: ignore[call-overload]
        expected=sum(int(r["expected"]) for r in results),  # type: ignore[call-overload]
        seconds=max(0.0, (last_ns - t0_ns) / 1e9),
        latencies_ms=[us / 1000.0 for r in results for us in r["latencies_us"]],  # type: ignore[attr-defined]
        errors=sum(int(r["errors"]) for r in results),  # type: ignore[call-overload]
        cpu=_cpu_percent(before, after, wall),
        counts={kind: len(group) for kind, group in procs.items()})


async def run_capacity_at(work: Workload, data_path: str = "",
                          workers: int = 0) -> tuple[Measurement, Measurement]:
    """(gateway, direct) at ``work.sessions`` sessions: a fresh gateway for the first, on
    ``[services] data_path`` (empty: the default) with ``[gateway] workers`` edge
    processes (0: the default)."""
    async with stage(max_sessions=work.sessions + 8, warm=0) as st:
        if data_path:
            st.env["ACPGATE_services__data_path"] = data_path
        if workers:
            st.env["ACPGATE_gateway__workers"] = str(workers)
        async with serve(st) as sv:
            gateway = await measure("gateway", work,
                                    ["ws", str(st.workspace), st.ws_url, st.mint_token()], sv)
        direct = await measure("direct", work, ["direct", str(st.workspace)], None)
    return gateway, direct


def rows_of(work: Workload, gateway: Measurement, direct: Measurement) -> list[Row]:
    """The results-table rows of one N."""
    n = work.sessions
    ratio = gateway.rate / direct.rate if direct.rate else math.nan
    lat_ok = gateway.p99 <= 20.0
    cpu = ", ".join(f"{kind} {gateway.cpu[kind]:.0f} %" for kind in KINDS
                    if kind != "session" or gateway.cpu[kind] >= 0.5)
    return [
        Row("28", f"{n} sessions × {1000 / work.pace_ms:g} updates/s, delivered, gateway",
            "updates/s", Dist(gateway.rate, gateway.rate, 1), f"{n} adapters read directly",
            Dist(direct.rate, direct.rate, 1), "≥ 0.95× direct", ratio >= 0.95,
            f"{gateway.delivered:,}/{gateway.expected:,} updates ({direct.delivered:,}/"
            f"{direct.expected:,} direct) over {work.clients} client processes, "
            f"{gateway.errors + direct.errors} errors; CPU over the stream: {cpu} "
            f"({gateway.counts['adapters']} adapters, {gateway.counts['wrappers']} wrappers); "
            f"direct: clients {direct.cpu['clients']:.0f} %, adapters "
            f"{direct.cpu['adapters']:.0f} % ({direct.counts['adapters']} adapters)"),
        Row("28", f"{n} sessions streaming, relay latency, gateway", "ms",
            Dist(gateway.p50, gateway.p99, len(gateway.latencies_ms)),
            f"{n} adapters read directly", Dist(direct.p50, direct.p99,
                                                len(direct.latencies_ms)),
            "p99 ≤ 20 ms", lat_ok, "median and p99 of every update's adapter-write → "
            "client-read latency"),
    ]


def table_of(pairs: Sequence[tuple[Measurement, Measurement]], data_path: str = "",
             workers: int = 0) -> list[str]:
    """The capacity table: one line per N."""
    path = f", `[services] data_path = \"{data_path}\"`" if data_path else ""
    path += f", `[gateway] workers = {workers}` (edge CPU: all of them)" if workers else ""
    lines = ["", "Capacity: N sessions × 50 updates/s, CPU per process over the "
             f"stream (100 % = one core){path}", "",
             "| sessions | gateway updates/s | p50 / p99 ms | edge CPU | lifecycle CPU | "
             "session CPU | clients CPU | adapters + wrappers CPU | direct updates/s | "
             "direct p50 / p99 ms | ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for gw, dr in pairs:
        lines.append(
            f"| {gw.sessions} | {fmt(gw.rate)} | {fmt(gw.p50)} / {fmt(gw.p99)} | "
            f"{gw.cpu['edge']:.0f} % | {gw.cpu['lifecycle']:.0f} % | {gw.cpu['session']:.0f} % | "
            f"{gw.cpu['clients']:.0f} % | {gw.cpu['adapters']:.0f} + {gw.cpu['wrappers']:.0f} % | "
            f"{fmt(dr.rate)} | {fmt(dr.p50)} / {fmt(dr.p99)} | "
            f"{gw.rate / dr.rate if dr.rate else math.nan:.2f}× |")
    return lines


async def run_capacity(counts: Sequence[int], updates: int, pace_ms: float, clients: int,
                       sections: list[str], data_path: str = "", workers: int = 0) -> list[Row]:
    """Every N of ``counts``: the rows, and the capacity table appended to ``sections``;
    ``data_path``: the gateway's ``[services] data_path`` (empty: its default); ``workers``:
    its ``[gateway] workers`` (0: its default)."""
    raise_fd_limit()
    rows: list[Row] = []
    pairs: list[tuple[Measurement, Measurement]] = []
    for n in counts:
        work = Workload(n, updates, pace_ms, clients)
        print(f"[bench] capacity: {n} sessions, {work.prompt}, {clients} client processes",
              file=sys.stderr, flush=True)
        gateway, direct = await run_capacity_at(work, data_path, workers)
        pairs.append((gateway, direct))
        rows += rows_of(work, gateway, direct)
    sections += table_of(pairs, data_path, workers)
    return rows
