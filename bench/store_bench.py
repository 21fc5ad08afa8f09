"""Report rows #5 and #6: ``session/load`` of a long history, AppendTurn throughput.

``session/load``: the SQLite store is seeded directly through the session store
API (alternating user / assistant items, 20 per turn; a session from before the
event log, so a load replays its history), then ``session/load`` is timed through ``acpgate acp`` until its result — which arrives after the
whole history has been replayed as ``session/update`` notifications. Baseline:
reading the same items straight from the store in this process.

AppendTurn: a two-item turn (user + assistant), one call at a time, through
the real gRPC session service (``acpgate session-service`` on a unix socket)
and directly against :class:`~services.session.store.SessionStore`.

Both run on the stage's store: the SQLite file by default, or the PostgreSQL
database of its ``[store] url`` (:mod:`bench.pg_bench`); ``backend`` names it
in the rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from acpgate_contracts.session.v1 import session_pb2, session_pb2_grpc
from bench.relay import WAIT_SECS, initialize
from bench.sizes import Sizes
from bench.stage import ACPGATE, ALIAS, REPO, Stage, child_env
from bench.stats import Dist, Row
from services.common.grpc_auth import grpc_security, open_service_channel
from services.common.grpc_channel import wait_healthy
from services.common.protocol import M_SESSION_CLOSE, M_SESSION_LOAD
from services.session.api.server import store_target
from services.session.store import HistoryEntry, NewSession, SessionStore, StoreTarget, open_store

ITEMS_PER_TURN = 20
USER_TEXT = "please summarise the build log and list the failing tests " * 2
ASSISTANT_TEXT = "The build failed in three places; the failing tests are listed below. " * 4


def _turn_items(n: int) -> list[HistoryEntry]:
    return [HistoryEntry(role="user" if i % 2 == 0 else "assistant",
                         text=USER_TEXT if i % 2 == 0 else ASSISTANT_TEXT) for i in range(n)]


async def seed_history(store: SessionStore, session_id: str, workspace: Path, items: int) -> None:
    """A stored session of ``items`` alternating user / assistant messages."""
    await store.create_session(NewSession(session_id, ALIAS, str(workspace), state="inactive"))
    left = items
    while left > 0:
        n = min(ITEMS_PER_TURN, left)
        await store.append_turn(session_id, _turn_items(n))
        left -= n


#: Mark a session as one from before the event log (its history is what a load replays).
_BEFORE_THE_LOG = "UPDATE sessions SET log_from_turn = 0 WHERE id = "


async def before_the_log(target: StoreTarget, session_id: str) -> None:
    """``session_id`` (seeded through the store API, which logs nothing) as a session from
    before its event log: ``session/load`` replays the stored history."""
    if isinstance(target, Path):
        def mark() -> None:
            with contextlib.closing(sqlite3.connect(target)) as con, con:
                con.execute(_BEFORE_THE_LOG + "?", (session_id,))

        await asyncio.to_thread(mark)
    elif target is not None:
        con = await asyncpg.connect(target.url)
        try:
            await con.execute(_BEFORE_THE_LOG + "$1", session_id)
        finally:
            await con.close()


async def _read_all(store: SessionStore, session_id: str) -> int:
    return sum([1 async for _ in store.iter_history(session_id)])


def _on(backend: str) -> str:
    """The measure's suffix naming a store other than the default SQLite file."""
    return f", {backend} store" if backend else ""


async def run_load(st: Stage, sizes: Sizes, backend: str = "") -> list[Row]:
    """Rows #5: ``session/load`` of a long history."""
    cfg = st.acp_config()  # the store `acpgate acp` loads from
    sid = str(uuid.uuid4())
    target = store_target(cfg)
    store = await open_store(target)
    reads: list[float] = []
    try:
        await seed_history(store, sid, st.workspace, sizes.history_items)
        for _ in range(max(3, sizes.load_samples)):
            t0 = time.monotonic()
            count = await _read_all(store, sid)
            reads.append((time.monotonic() - t0) * 1000)
            assert count == sizes.history_items, count
    finally:
        await store.close()
    await before_the_log(target, sid)
    streams = await _stream_history(st, sid, max(3, sizes.load_samples), sizes.history_items)
    ep = await st.acp()
    loads: list[float] = []
    replayed: list[int] = []
    try:
        await initialize(ep.peer)
        sink = ep.peer.sink(sid)
        for _ in range(sizes.load_samples):
            sink.reset(0)
            t0 = time.monotonic()
            await ep.peer.request(M_SESSION_LOAD, {"sessionId": sid, "cwd": str(st.workspace),
                                                   "mcpServers": []}, WAIT_SECS)
            loads.append((time.monotonic() - t0) * 1000)
            replayed.append(sink.chunks)
            await ep.peer.request(M_SESSION_CLOSE, {"sessionId": sid}, WAIT_SECS)
    finally:
        await ep.close()
    expected = sizes.history_items // 2
    ok = all(r == expected for r in replayed)
    d = Dist.of(loads)
    return [Row("5", f"session/load of {sizes.history_items:,} messages, `acpgate acp`"
                     f"{_on(backend)}", "ms", d,
                "read the same items from the store directly", Dist.of(reads),
                "≤ 1 s", d.median <= 1000.0,
                f"time to the result, after the replay; includes the adapter spawn; "
                f"assistant chunks replayed before the result: {replayed[-1]:,} "
                f"(expected {expected:,}{'' if ok else ', MISMATCH'})"),
            Row("5", f"StreamHistory of {sizes.history_items:,} items, gRPC session service "
                     f"(one load's history fetch){_on(backend)}", "ms", Dist.of(streams),
                "read the same items from the store directly", Dist.of(reads),
                note="HistoryPage messages of up to 500 items / ~1 MiB")]


def _proto_turn() -> list[session_pb2.HistoryItem]:
    return [session_pb2.HistoryItem(role=session_pb2.HistoryItem.ROLE_USER, text=USER_TEXT),
            session_pb2.HistoryItem(role=session_pb2.HistoryItem.ROLE_ASSISTANT,
                                    text=ASSISTANT_TEXT)]


@asynccontextmanager
async def session_service(st: Stage) -> AsyncIterator[session_pb2_grpc.SessionServiceAsyncStub]:
    """``acpgate session-service`` on a unix socket of the stage, as a stub."""
    address = f"unix:{st.root}/ss.sock"
    env = child_env()
    env["ACPGATE_services__session_addr"] = address
    env["ACPGATE_paths__data_dir"] = str(st.acp_data_dir)  # the store `acpgate acp` loads
    proc = await asyncio.create_subprocess_exec(
        *ACPGATE, "session-service", "--config-dir", str(st.config_dir), env=env, cwd=str(REPO),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    # The service runs on the acp data dir (above): its install key is that dir's.
    channel = open_service_channel(grpc_security(st.acp_config()), address)
    try:
        await wait_healthy(channel, within=60.0)
        yield session_pb2_grpc.SessionServiceStub(channel)
    finally:
        await channel.close(None)
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _grpc_appends(st: Stage, turns: int) -> list[float]:
    async with session_service(st) as stub:
        sid = str(uuid.uuid4())
        await stub.CreateSession(session_pb2.CreateSessionRequest(
            session_id=sid, agent_alias=ALIAS, workspace_dir=str(st.workspace)))
        items = _proto_turn()
        for _ in range(min(20, turns)):  # warm-up
            await stub.AppendTurn(session_pb2.AppendTurnRequest(session_id=sid, items=items))
        out: list[float] = []
        for _ in range(turns):
            t0 = time.monotonic_ns()
            await stub.AppendTurn(session_pb2.AppendTurnRequest(session_id=sid, items=items))
            out.append((time.monotonic_ns() - t0) / 1e6)
        return out


async def _stream_history(st: Stage, sid: str, samples: int, expected: int) -> list[float]:
    """StreamHistory of the seeded session through the gRPC session service (ms each)."""
    out: list[float] = []
    async with session_service(st) as stub:
        for _ in range(samples):
            t0 = time.monotonic()
            n = 0
            async for page in stub.StreamHistory(session_pb2.StreamHistoryRequest(session_id=sid)):
                n += len(page.items)
            out.append((time.monotonic() - t0) * 1000)
            assert n == expected, n
    return out


async def _direct_appends(st: Stage, turns: int) -> list[float]:
    cfg = st.config()
    store = await open_store(store_target(cfg) if cfg.store.url else st.root / "direct" / "s.db")
    try:
        sid = str(uuid.uuid4())
        await store.create_session(NewSession(sid, ALIAS, str(st.workspace)))
        items = _turn_items(2)
        for _ in range(min(20, turns)):
            await store.append_turn(sid, items)
        out: list[float] = []
        for _ in range(turns):
            t0 = time.monotonic_ns()
            await store.append_turn(sid, items)
            out.append((time.monotonic_ns() - t0) / 1e6)
        return out
    finally:
        await store.close()


def _rate(latencies_ms: list[float]) -> Dist:
    """Calls per second over the whole run, with the slow tail as a rate."""
    total = sum(latencies_ms) / 1000.0
    tail = Dist.of([1000.0 / ms for ms in latencies_ms], higher_is_better=True).p99
    return Dist(len(latencies_ms) / total if total else 0.0, tail, len(latencies_ms))


async def run_append(st: Stage, sizes: Sizes, backend: str = "") -> list[Row]:
    """Rows #6 (AppendTurn): per-call latency and sequential throughput, gRPC vs store."""
    direct = await _direct_appends(st, sizes.append_turns)
    grpc_ms = await _grpc_appends(st, sizes.append_turns)
    return [
        Row("6", f"AppendTurn latency (2 items), gRPC session service{_on(backend)}", "ms",
            Dist.of(grpc_ms), "SessionStore.append_turn directly", Dist.of(direct),
            note=f"{sizes.append_turns} sequential calls each side"),
        Row("6", f"AppendTurn throughput, one caller, gRPC session service{_on(backend)}",
            "turns/s",
            _rate(grpc_ms), "SessionStore.append_turn directly", _rate(direct),
            note="median column = calls / total time; p99 column = the slowest 1 % of calls "
                 "as a rate"),
    ]
