"""uvloop against the standard event loop, per acpgate process (bench/PROFILE.md).

``python -m bench.loop_ab [--rounds N] [--updates N] [--turns N]`` prints a table.

Every process that picks its loop (``services.common.event_loop``) is run twice
side by side, once with ``ACPGATE_EVENT_LOOP=<process>=asyncio`` and once with
``=uvloop``, and measured in interleaved rounds so that the shared machine's
load hits both alike. The steady figure is CPU seconds of that process
(psutil user + system) per unit of work; wall-clock rates and times are printed
too. Units of work:

- ``acp``: a ``firehose N`` prompt through ``acpgate acp`` (µs per update), a
  cold ``session/new`` (ms), a paced prompt (p50 latency, ms);
- ``edge`` / ``lifecycle``: the same prompt through ``acpgate serve``'s gateway
  (µs per update of each child), a cold ``session/new`` through it (ms; the
  lifecycle service spawns the adapter);
- ``session``: one-update prompts through the gateway (session-service CPU per
  turn: one ``AppendTurn`` each);
- ``agent``: the built-in agent (demo model) on stdio: spawn → ``initialize``
  answered (ms) and short turns (agent CPU per turn).

Two stages per variant pair: ``acpgate acp`` and ``acpgate serve`` each keep
their own data dir in a stage, and two of a kind on one dir would reap each
other's adapters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import psutil

from bench.relay import initialize, latency_round, new_session, open_session, throughput_round
from bench.stage import ACPGATE, REPO, Serve, Stage, child_env, serve, stage
from bench.transports import Endpoint, stdio_peer
from services.common.config import ensure_default_config
from services.common.event_loop import ASYNCIO, ENV_EVENT_LOOP, UVLOOP
from services.common.protocol import M_SESSION_CLOSE

LOOPS = (ASYNCIO, UVLOOP)
SERVED = ("edge", "lifecycle", "session")


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def _cpu_of(proc: psutil.Process, work: Callable[[], Awaitable[object]]) -> float:
    """CPU seconds ``proc`` spent while ``work`` ran."""
    before = await asyncio.to_thread(_cpu, proc)
    await work()
    return await asyncio.to_thread(_cpu, proc) - before


async def _timed(work: Callable[[], Awaitable[object]]) -> float:
    t0 = time.monotonic()
    await work()
    return time.monotonic() - t0


async def _cold_new(ep: Endpoint, cwd: Path) -> None:
    sid = await new_session(ep.peer, cwd)
    await ep.peer.request(M_SESSION_CLOSE, {"sessionId": sid})


@asynccontextmanager
async def _variant(loop: str) -> AsyncIterator[tuple[Stage, Endpoint, Serve, Endpoint]]:
    """A stage whose ``acpgate acp`` and ``acpgate serve`` children run on ``loop``."""
    procs = ",".join(f"{p}={loop}" for p in ("acp", *SERVED))
    async with AsyncExitStack() as stack:
        st = await stack.enter_async_context(stage(warm=0))
        st.env = {ENV_EVENT_LOOP: procs}
        sv = await stack.enter_async_context(serve(st))
        acp = await st.acp()
        stack.push_async_callback(acp.close)
        ws = await st.ws(st.mint_token())
        stack.push_async_callback(ws.close)
        yield st, acp, sv, ws


async def _agent(cfg_dir: Path, loop: str) -> tuple[Endpoint, float]:
    """The built-in agent on ``loop``; (endpoint, seconds from spawn to ``initialize``)."""
    t0 = time.monotonic()
    ep = await stdio_peer([*ACPGATE, "agent", "--config-dir", str(cfg_dir)],
                          env=child_env({ENV_EVENT_LOOP: f"agent={loop}"}), cwd=REPO)
    await initialize(ep.peer)
    return ep, time.monotonic() - t0


async def run(rounds: int, updates: int, turns: int) -> dict[tuple[str, str], list[float]]:
    """Every measure → loop → samples."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    async with AsyncExitStack() as stack:
        variants = {loop: await stack.enter_async_context(_variant(loop)) for loop in LOOPS}
        sids: dict[tuple[str, str], str] = {}
        for loop, (st, acp, _, ws) in variants.items():
            sids[loop, "acp"] = await open_session(acp, st.workspace)
            sids[loop, "ws"] = await open_session(ws, st.workspace)
            await throughput_round(acp.peer, sids[loop, "acp"], 2000)  # warm-up
            await throughput_round(ws.peer, sids[loop, "ws"], 2000)
        for _ in range(rounds):
            for loop, (st, acp, sv, ws) in variants.items():
                acp_proc = psutil.Process(acp.proc.pid)  # type: ignore[union-attr]
                sid = sids[loop, "acp"]
                rate: list[float] = []

                async def acp_prompt(peer=acp.peer, sid=sid, rate=rate) -> None:
                    rate.append(await throughput_round(peer, sid, updates))

                cpu = await _cpu_of(acp_proc, acp_prompt)
                out["acp: CPU per relayed update (µs)", loop].append(cpu / updates * 1e6)
                out["acp: relay rate (updates/s)", loop].append(rate[0])
                lat = await latency_round(acp.peer, sid, 200, 2.0)
                out["acp: latency p50 (ms)", loop].append(statistics.median(lat))
                secs = await _timed(lambda acp=acp, st=st: _cold_new(acp, st.workspace))
                out["acp: cold session/new (ms)", loop].append(secs * 1e3)

                kids = sv.children()
                sid = sids[loop, "ws"]
                befores = {k: await asyncio.to_thread(_cpu, kids[k]) for k in SERVED}
                rate = []
                await acp_prompt(ws.peer, sid, rate)
                for k in ("edge", "lifecycle"):
                    used = await asyncio.to_thread(_cpu, kids[k]) - befores[k]
                    out[f"{k}: CPU per relayed update (µs)", loop].append(used / updates * 1e6)
                out["gateway: relay rate (updates/s)", loop].append(rate[0])
                before = await asyncio.to_thread(_cpu, kids["session"])

                async def short_turns(ws=ws, sid=sid) -> None:
                    for _ in range(turns):
                        await throughput_round(ws.peer, sid, 1)

                secs = await _timed(short_turns)
                used = await asyncio.to_thread(_cpu, kids["session"]) - before
                out["session: CPU per turn (ms)", loop].append(used / turns * 1e3)
                out["gateway: one-update turns/s", loop].append(turns / secs)
                secs = await _timed(lambda ws=ws, st=st: _cold_new(ws, st.workspace))
                out["lifecycle: cold session/new via gateway (ms)", loop].append(secs * 1e3)

        cfg_dir = Path(tempfile.mkdtemp(prefix="acpb-agent-", dir="/tmp"))
        ensure_default_config(cfg_dir)
        for _ in range(rounds):
            for loop in LOOPS:
                ep, start = await _agent(cfg_dir, loop)
                try:
                    out["agent: spawn → initialize answered (ms)", loop].append(start * 1e3)
                    sid = await new_session(ep.peer, cfg_dir.parent)
                    proc = psutil.Process(ep.proc.pid)  # type: ignore[union-attr]

                    async def agent_turns(ep=ep, sid=sid) -> None:
                        for i in range(turns):
                            await ep.peer.prompt(sid, f"hello {i}")

                    t0 = time.monotonic()
                    cpu = await _cpu_of(proc, agent_turns)
                    out["agent: CPU per demo turn (ms)", loop].append(cpu / turns * 1e3)
                    out["agent: demo turns/s", loop].append(turns / (time.monotonic() - t0))
                finally:
                    await ep.close()
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(cfg_dir)
    return out


def render(out: dict[tuple[str, str], list[float]]) -> str:
    """One markdown row per measure: median of each loop, the ratio uvloop / asyncio."""
    lines = ["| measure | asyncio (median) | uvloop (median) | uvloop / asyncio | n |",
             "|---|---:|---:|---:|---:|"]
    for measure in dict.fromkeys(m for m, _ in out):
        a = statistics.median(out[measure, ASYNCIO])
        u = statistics.median(out[measure, UVLOOP])
        lines.append(f"| {measure} | {a:,.3g} | {u:,.3g} | {u / a if a else float('nan'):.2f} | "
                     f"{len(out[measure, ASYNCIO])} |")
    return "\n".join(lines)


def main() -> int:
    """Parse flags, run, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.loop_ab", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=50_000)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    load = psutil.getloadavg()[0]
    out = asyncio.run(run(args.rounds, args.updates, args.turns))
    print(f"load average before / after: {load:.2f} / {psutil.getloadavg()[0]:.2f}")
    print(render(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
