"""``python -m bench`` (``make bench``): run every benchmark and write ``bench/results.md``.

``--quick`` runs tiny sizes (the smoke test uses it); ``--only`` picks groups:
``reap``, ``lifecycle`` (kill -9 of the lifecycle service, then of an edge worker, under
streaming sessions; what re-adopting a session with a long log reads), ``append``, ``load``, ``postgres`` (load and append on PostgreSQL), ``failover``
(killpg -9 of one of two hosts on PostgreSQL mid-turn, the other loads its session), ``relay``,
``cold``, ``concurrency``, ``many`` (200 sessions streaming), ``flood``, ``stalled`` (the edge's
RSS with 20 clients that stopped reading on streaming sessions), ``history`` (loading
a session of big prompts), ``capacity`` (N sessions at 50 updates/s each, gateway against
direct, CPU per process: ``--sessions 100,500,2000`` and ``--clients`` size it to the machine),
``spread`` (a burst of connections over 2 and 4 edge workers: each worker's share),
``eventlog`` (relay throughput with the session's event log on vs off, its cost per event,
and ``kill -9`` of ``acpgate acp`` at random points of a streaming turn, then load; on
SQLite, then (full sizes) on PostgreSQL when its server binaries are installed),
``idle`` (CPU and wake-ups of an idle ``acpgate acp``, and per idle session).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bench.big_history import run_big_history
from bench.capacity import default_clients, run_capacity
from bench.concurrency import run_concurrency
from bench.edge_kill import run_edge_kill
from bench.event_log_bench import run_crash, run_log_cost, run_postgres_log
from bench.failover import run_failover
from bench.flood import run_flood
from bench.idle import run_idle
from bench.lifecycle_kill import run_lifecycle_kill
from bench.many import run_many
from bench.pg_bench import run_postgres
from bench.readopt_read import run_readopt_read
from bench.reap_bench import run_reap
from bench.relay import run_cold, run_relay
from bench.report import machine, now_utc, render
from bench.sizes import FULL, QUICK, Sizes
from bench.spread import run_spread
from bench.stage import REPO, serve, stage
from bench.stalled import run_stalled
from bench.stats import Row
from bench.store_bench import run_append, run_load

GROUPS = ("relay", "cold", "concurrency", "many", "load", "append", "postgres", "failover",
          "reap", "flood", "stalled", "history", "capacity", "lifecycle",
          "spread", "eventlog", "idle")
DEFAULT_OUT = Path(__file__).resolve().parent / "results.md"


def _say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


async def run_all(sizes: Sizes, groups: Sequence[str], incidents: list[str],
                  skipped: list[str], sections: list[str] | None = None,
                  clients: int = 0, data_path: str = "", workers: int = 0) -> list[Row]:
    """Run the chosen groups; rows in report order (#); failed serve starts go to
    ``incidents``, rows that could not run (and why) to ``skipped``, tables of their own
    (capacity) to ``sections``; ``clients``: the capacity run's client processes (0: as
    many as suit this machine); ``data_path``: its gateway's ``[services] data_path``;
    ``workers``: its ``[gateway] workers`` (0: the default)."""
    rows: dict[str, list[Row]] = {}
    wanted = set(groups)
    if wanted & {"relay", "cold"}:
        async with stage() as st, serve(st):
            token = st.mint_token()
            if "relay" in wanted:
                _say("relay throughput and latency (direct / acpgate acp / gateway)")
                rows["relay"] = await run_relay(st, token, sizes)
            if "cold" in wanted:
                _say("cold session/new")
                rows["cold"] = await run_cold(st, token, sizes)
        incidents += st.failed_starts
    if "concurrency" in wanted:
        # A fresh gateway, so "idle" RSS is the edge before any session ever ran.
        async with stage(max_sessions=sizes.concurrent_sessions + 8,
                         warm=sizes.concurrent_sessions) as st, serve(st) as sv:
            _say(f"{sizes.concurrent_sessions} concurrent sessions")
            rows["concurrency"] = await run_concurrency(st, sv, st.mint_token(), sizes)
        incidents += st.failed_starts
    if "many" in wanted:
        async with stage(max_sessions=sizes.many_sessions + 8, warm=0) as st, serve(st) as sv:
            _say(f"{sizes.many_sessions} sessions streaming")
            rows["many"] = await run_many(st, sv, st.mint_token(), sizes)
        incidents += st.failed_starts
    if "load" in wanted:
        _say(f"session/load of {sizes.history_items} messages")
        async with stage() as st:
            rows["load"] = await run_load(st, sizes)
    if "append" in wanted:
        _say("AppendTurn")
        async with stage() as st:
            rows["append"] = await run_append(st, sizes)
    if "postgres" in wanted:
        _say(f"session/load of {sizes.history_items} messages and AppendTurn on PostgreSQL")
        rows["postgres"] = await run_postgres(sizes, skipped)
    if "failover" in wanted:
        _say("failover: killpg -9 of host A mid-turn, host B loads its session")
        rows["failover"] = await run_failover(sizes, skipped)
    if "reap" in wanted:
        _say(f"startup reap of {sizes.reap_leases} leases")
        rows["reap"] = await run_reap(sizes)
    if "lifecycle" in wanted:
        _say(f"kill -9 of the lifecycle service under {sizes.kill_sessions} streaming sessions")
        rows["lifecycle"] = await run_lifecycle_kill(sizes)
        _say(f"kill -9 of an edge worker under {sizes.edge_kill_sessions} streaming sessions; "
             f"re-adoption's read of {sizes.readopt_turns} turns x {sizes.readopt_chunks} chunks")
        rows["lifecycle"] += await run_edge_kill(sizes) + await run_readopt_read(sizes)
    if "flood" in wanted:
        # A fresh gateway: its peak RSS must be the flood's, not an earlier group's.
        async with stage() as st, serve(st) as sv:
            _say(f"{sizes.flood_requests} requests from a client that stopped reading")
            rows["flood"] = await run_flood(st.ws_url, sv, st.mint_token(), sizes)
        incidents += st.failed_starts
    if "stalled" in wanted:
        # A fresh gateway: its RSS must be the stalled clients', not an earlier group's.
        async with stage() as st, serve(st) as sv:
            _say(f"{sizes.stalled_clients} clients that stopped reading, sessions streaming, "
                 f"{sizes.stalled_secs:.0f} s")
            rows["stalled"] = await run_stalled(st, sv, st.mint_token(), sizes.stalled_clients,
                                                sizes.stalled_secs)
        incidents += st.failed_starts
    if "history" in wanted:
        _say("session/load of sessions with big prompts (edge and agent memory)")
        rows["history"] = await run_big_history(sizes)
    if "capacity" in wanted:
        _say(f"capacity: {', '.join(map(str, sizes.capacity_sessions))} sessions streaming "
             "at 50 updates/s each, gateway and direct")
        rows["capacity"] = await run_capacity(
            sizes.capacity_sessions, sizes.capacity_updates, sizes.capacity_pace_ms,
            clients or default_clients(), sections if sections is not None else [], data_path,
            workers)
    if "spread" in wanted:
        _say(f"{sizes.spread_connections} connections at once over 2 and 4 edge workers")
        rows["spread"] = await run_spread(sizes.spread_connections, sizes.spread_rounds,
                                         sizes.spread_hold_secs)
    if "eventlog" in wanted:
        _say("event log: relay throughput on / off, its cost per event, kill -9 at "
             f"{sizes.crash_points} random points")
        rows["eventlog"] = await run_log_cost(sizes) + await run_crash(sizes.crash_points)
        if sizes.log_on_postgres:
            _say("event log on PostgreSQL: the same rows")
            rows["eventlog"] += await run_postgres_log(sizes, skipped)
    if "idle" in wanted:
        _say(f"idle: acpgate acp with no session, then {sizes.idle_sessions} idle sessions")
        async with stage(max_sessions=sizes.idle_sessions + 8, warm=0) as st:
            rows["idle"] = await run_idle(st, sizes.idle_sessions, sizes.idle_windows,
                                          sizes.idle_window_secs)
    return [row for g in GROUPS for row in rows.get(g, [])]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags, run, write the results page."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file to write")
    parser.add_argument("--only", default=",".join(GROUPS),
                        help=f"comma-separated groups (default: all of {', '.join(GROUPS)})")
    parser.add_argument("--sessions", default="",
                        help="capacity: comma-separated session counts (default 50,200; "
                             "e.g. 100,500,1000,2000 on a 16-core machine)")
    parser.add_argument("--clients", type=int, default=0,
                        help="capacity: client processes (default: 3 per 4 cores, 2 to 12)")
    parser.add_argument("--data-path", choices=("auto", "grpc"), default="",
                        help="capacity: the gateway's [services] data_path (default: its own)")
    parser.add_argument("--workers", type=int, default=0,
                        help="capacity: the gateway's [gateway] workers, edge processes on "
                             "its port (default: its own)")
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    sizes = QUICK if args.quick else FULL
    if args.sessions:
        try:
            counts = tuple(int(x) for x in args.sessions.split(",") if x.strip())
        except ValueError:
            parser.error(f"--sessions wants comma-separated numbers, not {args.sessions!r}")
        if not counts or min(counts) < 1:
            parser.error("--sessions wants at least one count, each at least 1")
        sizes = replace(sizes, capacity_sessions=counts)
    info = machine(REPO)
    started = now_utc()
    t0 = time.monotonic()
    incidents: list[str] = []
    skipped: list[str] = []
    sections: list[str] = []
    if args.workers < 0:
        parser.error("--workers wants a count, at least 1 (0: the gateway's default)")
    rows = asyncio.run(run_all(sizes, groups, incidents, skipped, sections, args.clients,
                               args.data_path, args.workers))
    text = render(info, rows, started=started, seconds=time.monotonic() - t0, quick=args.quick,
                  incidents=incidents, skipped=skipped, sections=sections)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    _say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
