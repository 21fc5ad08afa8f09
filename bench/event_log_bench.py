"""The session's event log: what it costs on the relay, and what a ``kill -9`` loses.

- Relay throughput with the log on against the same build with it off (the edge's
  measurement-only switch, ``services.edge.sessions.event_log.OFF_ENV``), over
  ``acpgate acp`` and the gateway, rounds interleaved (each pair's order alternates);
  the gateway's session service CPU and store bytes per event over the log-on rounds.
- A crash benchmark: ``acpgate acp`` streaming a paced turn is killed (``kill -9`` of
  its process group) at random points; a fresh one loads the session. Events the client
  had that the replay lacks are compared with those the client got in its last 50 ms
  (the log's commit window); events replayed twice are counted.

Every row names its store: SQLite (the data dir's file) or PostgreSQL
(:func:`run_postgres_log`, on a throwaway cluster as :mod:`bench.pg_bench` starts one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import psutil

from bench.relay import open_session, throughput_round
from bench.sizes import Sizes
from bench.stage import ACPGATE, REPO, Stage, child_env, serve, stage
from bench.stats import Dist, Row
from services.common.log_forms import FORM_TEXT_CHUNKS, TEXT_CHUNK_MID, TEXT_CHUNK_TAIL
from services.edge.sessions.event_log import COMMIT_SECS, OFF_ENV
from tests.pg_cluster import Cluster, missing_reason, running_cluster

#: The crash benchmark's stream: one update every PACE_MS (500 updates/s).
PACE_MS = 2.0
WAIT_SECS = 120.0
SQLITE = "SQLite"
POSTGRES = "PostgreSQL"
#: The benchmark cluster: PostgreSQL's defaults (fsync, synchronous_commit on).
PG_SETTINGS = ("max_connections=100",)
#: A chunk's events, the bytes of their lines as a replay gives them, the bytes its row
#: holds, and the rows (``?`` / ``$n``: the text-chunk form and its template's length).
_PAYLOAD_SQL = (
    "SELECT coalesce(sum(last_event_id - first_event_id + 1), 0),"
    " coalesce(sum(length(payload) - (last_event_id - first_event_id)"
    " + (last_event_id - first_event_id + 1) * (length(prefix) + CASE form WHEN {form}"
    " THEN {template} + length(CAST(first_event_id AS TEXT)) ELSE 0 END)), 0),"
    " coalesce(sum(length(payload) + length(prefix)), 0), count(*)"
    " FROM event_chunks")
_TEMPLATE = len(TEXT_CHUNK_MID) + len(TEXT_CHUNK_TAIL)


def _store_bytes(data_dir: Path) -> int:
    db = data_dir / "sessions" / "acp-sessions.db"
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def _payload_bytes(data_dir: Path) -> tuple[int, int, int, int]:
    """Events logged, their lines' bytes (as a replay gives them), the bytes their rows hold,
    and the rows (chunks), in the SQLite store of ``data_dir``."""
    db = data_dir / "sessions" / "acp-sessions.db"
    # A row's events: each its prefix and its part, plus (text chunks, form 1) the line's
    # event id and the template around the text.
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        count, lines, stored, rows = conn.execute(
            _PAYLOAD_SQL.format(form="?", template="?"),
            (FORM_TEXT_CHUNKS, _TEMPLATE)).fetchone()
    return int(count), int(lines), int(stored), int(rows)


class _Store:
    """The log-on side's store, measured: its bytes, what its rows hold, its server's CPU."""

    def __init__(self, backend: str, data_dir: Path, url: str = "",
                 cluster: Cluster | None = None) -> None:
        self.backend = backend
        self._data_dir = data_dir
        self._url = url
        self._cluster = cluster

    async def size(self) -> int:
        """SQLite: the file and its WAL; PostgreSQL: the database (tables, indexes, TOAST)."""
        if self._url:
            con = await asyncpg.connect(self._url)
            try:
                return int(await con.fetchval("SELECT pg_database_size(current_database())"))
            finally:
                await con.close()
        return _store_bytes(self._data_dir)

    async def payload(self) -> tuple[int, int, int, int]:
        """:func:`_payload_bytes` of this store."""
        if not self._url:
            return await asyncio.to_thread(_payload_bytes, self._data_dir)
        con = await asyncpg.connect(self._url)
        try:
            row = await con.fetchrow(_PAYLOAD_SQL.format(form="$1::integer", template="$2"),
                                     FORM_TEXT_CHUNKS, _TEMPLATE)
        finally:
            await con.close()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    def server_cpu(self) -> float:
        """CPU seconds (user+system) of the PostgreSQL server's processes so far (0: SQLite)."""
        if self._cluster is None:
            return 0.0
        pid = int((self._cluster.data_dir / "postmaster.pid").read_text().split()[0])
        total = 0.0
        with contextlib.suppress(psutil.NoSuchProcess):
            main = psutil.Process(pid)
            for proc in [main, *main.children()]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    total += sum(proc.cpu_times()[:2])
        return total


async def run_log_cost(sizes: Sizes, store: tuple[str, str] = ("", ""),
                       cluster: Cluster | None = None) -> list[Row]:
    """Throughput with the log on vs off, and the session service's cost per event; on the
    stages' own SQLite files, or on the PostgreSQL databases ``store`` names (log on, off)
    in ``cluster``."""
    n = sizes.throughput_n
    async with stage(store_url=store[0]) as on, stage(store_url=store[1]) as off:
        off.env = {OFF_ENV: "1"}
        measured = _Store(POSTGRES if store[0] else SQLITE, on.data_dir("serve"), store[0],
                          cluster)
        async with serve(on) as sv_on, serve(off):
            eps = {("acp", True): await on.acp(), ("acp", False): await off.acp(),
                   ("ws", True): await on.ws(on.mint_token()),
                   ("ws", False): await off.ws(off.mint_token())}
            try:
                sids = {k: await open_session(ep, on.workspace) for k, ep in eps.items()}
                for k, ep in eps.items():
                    await throughput_round(ep.peer, sids[k], min(n, 1000))
                rates: dict[tuple[str, bool], list[float]] = {k: [] for k in eps}
                session = sv_on.children()["session"]
                cpu0 = sum(session.cpu_times()[:2])
                server0 = measured.server_cpu()
                bytes0 = await measured.size()
                logged0 = (await measured.payload())[0]
                ws_events = 0
                for i in range(sizes.log_rounds):
                    # Each pair's order alternates, so a drift of the machine's load
                    # favours neither side.
                    order = list(eps) if i % 2 == 0 else list(reversed(eps))
                    for k in order:
                        rates[k].append(await throughput_round(eps[k].peer, sids[k], n))
                        ws_events += n if k == ("ws", True) else 0
                await asyncio.sleep(COMMIT_SECS * 4)
                cpu = sum(session.cpu_times()[:2]) - cpu0
                server = measured.server_cpu() - server0
                grown = await measured.size() - bytes0
                logged, payload, stored, chunks = await measured.payload()
            finally:
                for ep in eps.values():
                    await ep.close()
    backend = measured.backend
    rows = []
    for path, label in (("acp", "`acpgate acp` (stdio)"), ("ws", "gateway (WebSocket)")):
        d_on = Dist.of(rates[path, True], higher_is_better=True)
        d_off = Dist.of(rates[path, False], higher_is_better=True)
        pairs = [a / b for a, b in zip(rates[path, True], rates[path, False], strict=True)]
        rows.append(Row("36", f"relay throughput with the event log, {label}, {n:,} "
                        f"updates/prompt, {backend} store", "updates/s", d_on,
                        "the same build, log off", d_off,
                        "≥ 0.9× of log off", d_on.median >= 0.9 * d_off.median,
                        f"{sizes.log_rounds} prompts each, rounds interleaved; on/off of "
                        f"each pair {min(pairs):.2f}–{max(pairs):.2f}×"))
    # Events the rounds logged in the measured store: on PostgreSQL the log-on `acpgate acp`
    # writes to it too (its store is the same database), on SQLite only the gateway.
    rounds_logged = max(logged - logged0, 1)
    server_note = (f"; the PostgreSQL server's processes {server * 1e6 / rounds_logged:.1f}"
                   f" µs per event written ({rounds_logged:,} events)"
                   if cluster is not None else "")
    rows.append(Row("36", f"session service CPU per logged event (gateway, log on), {backend} "
                    "store", "µs", Dist.of([cpu * 1e6 / max(ws_events, 1)]), "—", None,
                    note=f"{cpu:.2f} s CPU over {ws_events:,} relayed updates (user+system)"
                    f"{server_note}"))
    grown_what = "database growth" if cluster is not None else "db + WAL growth"
    rows.append(Row("36", f"store bytes per logged event ({backend}, {grown_what})", "B",
                    Dist.of([grown / rounds_logged]), "—", None,
                    note=f"lines {payload / max(logged, 1):.0f} B/event on average, stored in "
                    f"{stored / max(logged, 1):.0f} B/event (chunks of consecutive events): "
                    f"{logged:,} events in {chunks:,} rows"))
    return rows


async def run_postgres_log(sizes: Sizes, skipped: list[str]) -> list[Row]:
    """:func:`run_log_cost` and :func:`run_crash` with the store on a throwaway PostgreSQL
    cluster (none, with the reason in ``skipped``, without the server binaries)."""
    reason = missing_reason()
    if reason:
        skipped.append(f"event log rows on PostgreSQL: {reason}")
        return []
    with running_cluster(PG_SETTINGS) as cluster:
        names = ("acpgate_log_on", "acpgate_log_off", "acpgate_log_crash")
        for name in names:
            await asyncio.to_thread(cluster.create_database, name)
        rows = await run_log_cost(sizes, (cluster.dsn(names[0]), cluster.dsn(names[1])),
                                  cluster)
        rows += await run_crash(sizes.crash_points, store_url=cluster.dsn(names[2]))
    note = "PostgreSQL 15, default durability (fsync, synchronous_commit on), unix socket"
    return [Row(r.item, r.measure, r.unit, r.value, r.baseline_label, r.baseline, r.target,
                r.met, f"{r.note}; {note}" if r.note else note) for r in rows]


class _Acp:
    """``acpgate acp`` in a process group of its own, spoken to in JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._id = 0

    @classmethod
    async def start(cls, st: Stage) -> _Acp:
        env = child_env(st.env)
        env["ACPGATE_paths__data_dir"] = str(st.acp_data_dir)
        proc = await asyncio.create_subprocess_exec(
            *ACPGATE, "acp", "--config-dir", str(st.config_dir), env=env, cwd=str(REPO),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True, limit=1 << 24)
        return cls(proc)

    async def send(self, method: str, params: dict[str, Any]) -> int:
        assert self.proc.stdin is not None
        self._id += 1
        self.proc.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": self._id, "method": method,
                                            "params": params}) + b"\n")
        await self.proc.stdin.drain()
        return self._id

    async def message(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), WAIT_SECS)
        if not line:
            raise ConnectionError("acpgate acp closed its stdout")
        out: dict[str, Any] = orjson.loads(line)
        return out

    async def call(self, method: str, params: dict[str, Any]
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        rid = await self.send(method, params)
        seen: list[dict[str, Any]] = []
        while True:
            msg = await self.message()
            if msg.get("id") == rid and "method" not in msg:
                return seen, msg
            seen.append(msg)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.kill()
            await self.proc.wait()


def _ids(messages: list[dict[str, Any]], sid: str) -> list[int]:
    return [int(m["params"]["update"]["_meta"]["acpgate"]["eventId"]) for m in messages
            if m.get("method") == "session/update" and m["params"]["sessionId"] == sid
            and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"]


async def _one_crash(st: Stage, rng: random.Random) -> tuple[int, int, int, int]:
    """One kill at a random point; (events had, lost, in the last 50 ms, duplicated)."""
    first = await _Acp.start(st)
    try:
        await first.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        _, new = await first.call("session/new", {"cwd": str(st.workspace), "mcpServers": []})
        sid = new["result"]["sessionId"]
        await first.send("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": f"pace 100000 {PACE_MS}"}]})
        point = rng.randrange(20, 1500)
        had: list[tuple[int, int]] = []
        while len(had) < point:
            msg = await first.message()
            ids = _ids([msg], sid)
            if ids:
                had.append((ids[0], time.monotonic_ns()))
        first.kill()
        await first.proc.wait()
    finally:
        first.kill()
    second = await _Acp.start(st)
    try:
        await second.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        replay, _ = await second.call("session/load", {
            "sessionId": sid, "cwd": str(st.workspace), "mcpServers": []})
        await second.close()
    finally:
        second.kill()
    replayed = _ids(replay, sid)
    got = set(replayed)
    last = had[-1][1]
    lost = sum(1 for i, _ in had if i not in got)
    window = sum(1 for _, at in had if last - at <= COMMIT_SECS * 1e9)
    return len(had), lost, window, len(replayed) - len(got)


async def run_crash(points: int, seed: int = 36, store_url: str = "") -> list[Row]:
    """``kill -9`` of ``acpgate acp`` at ``points`` random points of a streaming turn, on
    the stage's SQLite file or the PostgreSQL database ``store_url`` names."""
    rng = random.Random(seed)
    results = []
    async with stage(store_url=store_url) as st:
        for _ in range(points):
            results.append(await _one_crash(st, rng))
    lost = [r[1] for r in results]
    over = sum(1 for r in results if r[1] > r[2])
    dups = sum(r[3] for r in results)
    return [Row("36", f"events the client had but the store lost, kill -9 of `acpgate acp` at "
                f"{points} random points of a {1000 / PACE_MS:.0f} updates/s turn, "
                f"{POSTGRES if store_url else SQLITE} store", "events",
                Dist.of([float(x) for x in lost]), "events the client got in its last 50 ms",
                Dist.of([float(r[2]) for r in results]),
                "≤ the last 50 ms' events, 0 duplicated", over == 0 and dups == 0,
                f"{over} of {points} kills lost more than the last 50 ms; {dups} events "
                f"replayed twice; the client had {min(r[0] for r in results)}–"
                f"{max(r[0] for r in results)} events at the kill")]
