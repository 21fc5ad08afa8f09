"""How much each benchmark does: the full run (``make bench``) and a tiny one (smoke test)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Workload sizes of one benchmark run."""

    #: Relay throughput: updates per prompt and rounds per path.
    throughput_n: int = 20_000
    #: A shorter stream too: throughput that falls with the stream length is a red flag.
    throughput_small_n: int = 2_000
    #: 15: a row of 5 prompts swung ±10 % between runs on 2 cores (the v2/v1 pair 0.89–1.07×).
    throughput_rounds: int = 15
    #: Relay latency: paced updates per prompt, their spacing and rounds per path.
    latency_n: int = 400
    latency_pace_ms: float = 2.0
    latency_rounds: int = 3
    #: Cold session/new samples per path.
    cold_samples: int = 10
    #: Concurrency: sessions, updates per session per round, rounds.
    concurrent_sessions: int = 50
    concurrent_n: int = 1_000
    concurrent_rounds: int = 3
    #: Many sessions streaming at once (edge memory).
    many_sessions: int = 200
    #: Streaming sessions while the lifecycle service is killed.
    kill_sessions: int = 60
    #: Streaming sessions while an edge worker is killed (the test config's connections
    #: allow 30 at most).
    edge_kill_sessions: int = 30
    #: Each of those sessions' turn: chunks, 0.1 s apart.
    edge_kill_chunks: int = 60
    #: A re-adopted session's history: turns, and chunks per turn.
    readopt_turns: int = 50
    readopt_chunks: int = 2_000
    #: session/load: stored history items and samples.
    history_items: int = 10_000
    load_samples: int = 5
    #: AppendTurn calls per side.
    append_turns: int = 500
    #: Startup reap: open leases and samples.
    reap_leases: int = 500
    reap_samples: int = 3
    #: Flood: initialize requests from one client that stopped reading.
    flood_requests: int = 60_000
    #: Clients that stopped reading on streaming sessions: how long the edge is watched.
    stalled_clients: int = 20
    #: The event log's crash benchmark: kill -9 points of a streaming turn.
    crash_points: int = 20
    #: The event log's cost: on/off pairs of throughput rounds per path.
    log_rounds: int = 10
    #: The event log's rows on PostgreSQL too (a cluster and two more gateways: left out of
    #: the smoke test's time).
    log_on_postgres: bool = True
    stalled_secs: float = 300.0
    #: Big history: prompts per session, one run each, and their size.
    big_history_prompts: tuple[int, ...] = (5, 12)
    big_history_prompt_mb: int = 15
    #: Capacity: sessions per run, and each session's stream (``pace N MS``).
    capacity_sessions: tuple[int, ...] = (50, 200)
    capacity_updates: int = 250
    capacity_pace_ms: float = 20.0
    #: Spread over edge workers: connections opened at once, and rounds; how long one
    #: worker is stopped in the held-up rounds (past the 1 s a sibling was once waited).
    spread_connections: int = 200
    spread_rounds: int = 3
    spread_hold_secs: float = 1.5
    #: Idle cost: sessions left open with no turn, and the metering windows (count, secs).
    idle_sessions: int = 50
    idle_windows: int = 3
    idle_window_secs: float = 2.5


FULL = Sizes()
QUICK = Sizes(throughput_n=200, throughput_small_n=50, throughput_rounds=1, latency_n=20, latency_pace_ms=1.0,
              latency_rounds=1, cold_samples=2, concurrent_sessions=3, concurrent_n=50,
              concurrent_rounds=1, many_sessions=4, kill_sessions=3, edge_kill_sessions=3,
              edge_kill_chunks=30,
              readopt_turns=3, readopt_chunks=50,
              history_items=40, load_samples=1, append_turns=10,
              reap_leases=10, reap_samples=1, flood_requests=2_000, stalled_clients=4,
              crash_points=2, log_rounds=1, log_on_postgres=False,
              stalled_secs=5.0, big_history_prompts=(2,),
              big_history_prompt_mb=1, capacity_sessions=(4,), capacity_updates=25,
              spread_connections=12, spread_rounds=1,
              spread_hold_secs=0.2, idle_sessions=2, idle_windows=1, idle_window_secs=0.5)
