"""Cut-and-reattach runs against a real ``acpgate serve``; memory per detached session and
per attached observer.

``python -m bench.reattach [--runs 20]``. Each run starts a turn of the scripted agent
that streams 30 chunks 0.1 s apart, reads a random number of them, cuts the socket
(no close frame) and attaches again from a new connection with ``after_message`` and
the last event id it read — either at once (the turn still runs: the rest comes from
the ring, then live) or once the turn ended while nobody was attached (all of the rest
from the ring). Lost = chunks never seen; duplicated = chunks seen twice. Then the edge
process's RSS is read before and after N sessions are left detached mid-turn, and
before and after M observers attach to one session.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
from pathlib import Path

import psutil

from tests.gateway.attach_client import cut, event_ids, kind, read_until
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, Token, running_gateway
from tests.security.scripted_agent import agent_section

CHUNKS = 30


async def one_run(gw: Gateway, token: Token, *, ended: bool, rng: random.Random) -> tuple[int, int]:
    """(lost, duplicated) chunks of one cut-and-reattach run."""
    first = RawClient(await gw.connect(token))
    sid = (await first.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
    await first.send("session/prompt", {"sessionId": sid, "prompt": f"stream {CHUNKS}"})
    keep = rng.randint(1, 10)
    before = await read_until(first.ws, lambda m: kind(m) == "agent_message_chunk" and
                              m["params"]["update"]["content"]["text"] == f"chunk {keep - 1} ")
    cut(first.ws)
    if ended:  # the turn runs to its end (and is stored) while nobody is attached
        await asyncio.sleep(CHUNKS * 0.1 + 1.0)
    again = RawClient(await gw.connect(token))
    seen, resp = await again.call("session/attach", {
        "sessionId": sid, "historyPolicy": "after_message",
        "afterMessageId": event_ids(before)[-1]})
    assert "result" in resp, resp
    if not any(kind(m) == "turn_complete" for m in seen):
        seen += await read_until(again.ws, lambda m: kind(m) == "turn_complete")
    texts = [m["params"]["update"]["content"]["text"] for m in before + seen
             if kind(m) == "agent_message_chunk"]
    expected = [f"chunk {i} " for i in range(CHUNKS)]
    lost = sum(1 for t in expected if t not in texts)
    duplicated = len(texts) - len(set(texts))
    await again.result("session/close", {"sessionId": sid})
    await again.ws.close()
    return lost, duplicated


async def rss(gw: Gateway) -> int:
    """The edge process's resident memory, in bytes, after a moment to settle."""
    await asyncio.sleep(1.0)
    return int(psutil.Process(gw.edge_pid()).memory_info().rss)


async def memory(gw: Gateway, token: Token, sessions: int, observers: int) -> tuple[float, float]:
    """(bytes per detached session, bytes per attached observer) of the edge process."""
    start = await rss(gw)
    for _ in range(sessions):
        c = RawClient(await gw.connect(token))
        sid = (await c.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
        await c.send("session/prompt", {"sessionId": sid, "prompt": f"stream {CHUNKS}"})
        await read_until(c.ws, lambda m: "chunk 2 " in json.dumps(m))
        cut(c.ws)  # left detached, its turn streaming into the ring
    await asyncio.sleep(CHUNKS * 0.1)
    per_session = (await rss(gw) - start) / sessions
    owner = RawClient(await gw.connect(token))
    sid = (await owner.result("session/new", {"agentAlias": "scripted"}))["sessionId"]
    base = await rss(gw)
    held = []
    for _ in range(observers):
        watcher = RawClient(await gw.connect(token))
        await watcher.result("session/attach", {"sessionId": sid, "role": "observer",
                                                "historyPolicy": "none"})
        held.append(watcher)
    per_observer = (await rss(gw) - base) / observers
    for watcher in held:
        await watcher.ws.close()
    return per_session, per_observer


async def main(runs: int, sessions: int, observers: int) -> None:
    """Print the replay figures and the memory figures."""
    rng = random.Random(27)
    with tempfile.TemporaryDirectory() as tmp:
        async with running_gateway(Path(tmp), extra=agent_section("scripted"),
                                   max_sessions=sessions + observers + 8,
                                   per_token=sessions + observers + 8,
                                   gateway="max_connections = 256\nmax_connections_per_token = 256\n",
                                   log_level="warning") as gw:
            token = await gw.token("bench")
            for ended in (False, True):
                lost = duplicated = 0
                for _ in range(runs):
                    got = await one_run(gw, token, ended=ended, rng=rng)
                    lost += got[0]
                    duplicated += got[1]
                case = "turn ended while away" if ended else "turn still running"
                print(f"{case}: {runs} runs, {runs * CHUNKS} chunks: "
                      f"lost {lost}, duplicated {duplicated}")
            per_session, per_observer = await memory(gw, token, sessions, observers)
            print(f"edge RSS per detached session (mid-turn, ring filling): "
                  f"{per_session / 1024:.1f} KiB; per attached observer: "
                  f"{per_observer / 1024:.1f} KiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--observers", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.sessions, args.observers))
