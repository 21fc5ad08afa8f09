"""The gateway's per-connection OutgoingQueue fast path and the compression switch.

A put that fits completes without suspending (no lock, no timer); a put that
does not fit waits, oldest first, and is handed room by the getter; the
character and message bounds hold throughout. ``[gateway] compression``
decides whether permessage-deflate is negotiated with a client that offers it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from acpgate_contracts.lifecycle.v1 import lifecycle_pb2
from services.common.config import load_config
from services.edge.transport.outqueue import OutgoingQueue, PutResult
from tests.launches import config_environ

from .wsfixtures import (
    FakeRuntime,
    frames_until,
    mint,
    running_edge,
    stand_in_services,
    write_config,
)

pytestmark = pytest.mark.timeout(60)


def run_without_suspending(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive ``coro`` one step: it must finish without awaiting anything."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("the coroutine suspended")


async def test_put_with_room_does_not_suspend() -> None:
    q = OutgoingQueue(max_chars=100, max_messages=10)
    for i in range(10):
        assert run_without_suspending(q.put(f"m{i}", 5.0)) is PutResult.QUEUED
    assert len(q) == 10
    # get() with something queued does not suspend either.
    assert run_without_suspending(q.get()) == "m0"
    assert q.get_nowait() == "m1"
    assert [q.get_nowait() for _ in range(8)] == [f"m{i}" for i in range(2, 10)]
    assert q.get_nowait() is None and q.chars == 0


async def test_bounds_hold_and_waiters_are_served_oldest_first() -> None:
    q = OutgoingQueue(max_chars=10, max_messages=3)
    for m in ("aaaa", "bbbb"):
        assert await q.put(m, 1.0) is PutResult.QUEUED
    assert q.chars == 8
    big = asyncio.create_task(q.put("B" * 9, 5.0))  # does not fit beside 8 chars
    await asyncio.sleep(0)
    small = asyncio.create_task(q.put("s", 5.0))  # would fit, but must not overtake
    await asyncio.sleep(0)
    assert not big.done() and not small.done()
    assert q.chars == 8 and len(q) == 2
    assert q.get_nowait() == "aaaa"  # 4 + 9 > 10: still no room for the big one
    await asyncio.sleep(0)
    assert not big.done() and not small.done()
    assert q.get_nowait() == "bbbb"  # empty: the big one goes in, then the small one
    assert await big is PutResult.QUEUED
    assert await small is PutResult.QUEUED
    assert [q.get_nowait(), q.get_nowait()] == ["B" * 9, "s"]
    assert q.peak_chars <= 10


async def test_message_count_bound_and_timeout() -> None:
    q = OutgoingQueue(max_chars=1000, max_messages=2)
    assert await q.put("a", 0.01) is PutResult.QUEUED
    assert await q.put("b", 0.01) is PutResult.QUEUED
    assert await q.put("c", 0.01) is PutResult.TIMED_OUT
    assert len(q) == 2
    # A timed-out waiter is skipped; the next waiter gets the room.
    later = asyncio.create_task(q.put("d", 5.0))
    await asyncio.sleep(0)
    assert await q.get() == "a"
    assert await later is PutResult.QUEUED
    assert [q.get_nowait(), q.get_nowait(), q.get_nowait()] == ["b", "d", None]


async def test_close_wakes_waiting_puts_and_getters() -> None:
    q = OutgoingQueue(max_chars=5, max_messages=1)
    assert await q.put("x", 1.0) is PutResult.QUEUED
    waiting_put = asyncio.create_task(q.put("y", 30.0))
    empty = OutgoingQueue()
    waiting_get = asyncio.create_task(empty.get())
    await asyncio.sleep(0)
    await q.close()
    await empty.close()
    assert await waiting_put is PutResult.CLOSED
    assert await waiting_get is None
    assert await q.get() is None
    assert await q.put("z", 1.0) is PutResult.CLOSED


async def test_put_many_stays_together_in_order_and_waits_for_the_rest() -> None:
    q = OutgoingQueue(max_chars=100, max_messages=3)
    assert await q.put("a", 1.0) is PutResult.QUEUED
    batch = asyncio.create_task(q.put_many(["b1", "b2", "b3", "b4"], 5.0))
    await asyncio.sleep(0)
    single = asyncio.create_task(q.put("c", 5.0))  # behind the batch, never between its parts
    await asyncio.sleep(0)
    assert not batch.done() and len(q) == 3 and q.waiting == 2
    got = [await q.get() for _ in range(6)]
    assert got == ["a", "b1", "b2", "b3", "b4", "c"]
    assert await batch is PutResult.QUEUED and await single is PutResult.QUEUED
    assert run_without_suspending(q.put_many(["d", "e"], 1.0)) is PutResult.QUEUED


async def test_what_waits_behind_a_full_queue_is_bounded_in_sends_and_chars() -> None:
    """Past the bound a send is refused at once (the connection is then closed)."""
    q = OutgoingQueue(max_chars=10, max_messages=1, max_waiting=3, max_waiting_chars=20)
    assert await q.put("full", 1.0) is PutResult.QUEUED
    # The oldest waiting send may be of any size (a 10 MiB blob still passes alone) ...
    waiting = [asyncio.create_task(q.put("B" * 500, 30.0))]
    await asyncio.sleep(0)
    # ... behind it, at most 20 characters and 3 sends in all.
    waiting.append(asyncio.create_task(q.put("x" * 15, 30.0)))
    await asyncio.sleep(0)
    assert await q.put("y" * 6, 30.0) is PutResult.OVERFLOW  # 15 + 6 > 20 behind the oldest
    waiting.append(asyncio.create_task(q.put("z" * 5, 30.0)))
    await asyncio.sleep(0)
    assert q.waiting == 3 and q.peak_waiting == 3
    assert await q.put("w", 30.0) is PutResult.OVERFLOW  # three sends wait already
    assert await q.put_many(["u", "v"], 30.0) is PutResult.OVERFLOW
    # Room hands them in, oldest first; then there is room to wait again.
    assert [await q.get() for _ in range(4)] == ["full", "B" * 500, "x" * 15, "z" * 5]
    assert [await t for t in waiting] == [PutResult.QUEUED] * 3
    assert q.waiting == 0


async def test_a_cancelled_waiting_send_gives_its_chars_back() -> None:
    q = OutgoingQueue(max_chars=10, max_messages=1, max_waiting=10, max_waiting_chars=10)
    assert await q.put("full", 1.0) is PutResult.QUEUED
    oldest = asyncio.create_task(q.put("o", 30.0))
    await asyncio.sleep(0)
    gone = asyncio.create_task(q.put("g" * 10, 30.0))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert await q.get() == "full"  # the head moves on and skips the cancelled send
    assert await oldest is PutResult.QUEUED
    later = asyncio.create_task(q.put("l" * 10, 30.0))  # 10 chars fit behind the new oldest
    await asyncio.sleep(0)
    assert not later.done() or await later is PutResult.QUEUED
    assert await q.get() == "o"
    assert await later is PutResult.QUEUED


async def test_a_withdrawn_waiting_send_stops_counting_at_once() -> None:
    """A relayed request the agent withdrew while its send waited behind the full queue
    stops counting as an answer waiting at once, not when it reaches the head: a burst
    of withdrawn requests never closes a client that is reading."""
    q = OutgoingQueue(max_chars=10, max_messages=1, max_waiting=2, max_waiting_chars=100)
    assert await q.put("full", 1.0) is PutResult.QUEUED
    oldest = asyncio.create_task(q.put("o", 30.0))
    await asyncio.sleep(0)
    withdrawn = asyncio.create_task(q.put("w" * 20, 30.0))
    await asyncio.sleep(0)
    assert q.waiting == 2
    withdrawn.cancel()
    await asyncio.gather(withdrawn, return_exceptions=True)
    assert q.waiting == 1  # at once, though the oldest still waits ahead of it
    newer = asyncio.create_task(q.put("n", 30.0))  # may wait: not refused as OVERFLOW
    await asyncio.sleep(0)
    assert not newer.done()
    assert [await q.get() for _ in range(3)] == ["full", "o", "n"]
    assert await oldest is PutResult.QUEUED and await newer is PutResult.QUEUED


async def test_a_getter_wakes_for_a_fast_path_put() -> None:
    q = OutgoingQueue()
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not getter.done()
    assert run_without_suspending(q.put("hello", 1.0)) is PutResult.QUEUED
    assert await asyncio.wait_for(getter, 5.0) == "hello"


class Burst:
    """Test dialect: answers `burst` with n numbered frames, then a result."""

    async def __call__(self, runtime: Any, incoming: AsyncIterator[str], send: Any, *,
                       default_agent: str = "", caller: Any = None, remote: bool = False,
                       send_many: Any = None, revoked: Any = None,
                       stopping: asyncio.Event | None = None) -> None:
        async for line in frames_until(incoming, stopping):
            msg = json.loads(line)
            for i in range(msg["params"]["n"]):
                await send(json.dumps({"jsonrpc": "2.0", "method": "tick", "params": {"i": i}}))
            await send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}))


@pytest.mark.parametrize("enabled", [True, False])
async def test_compression_setting_decides_deflate(tmp_path: Path, enabled: bool) -> None:
    write_config(tmp_path / "cfg")
    path = tmp_path / "cfg" / "config.toml"
    path.write_text(path.read_text().replace(
        "[gateway]\n", f"[gateway]\ncompression = {str(enabled).lower()}\n", 1))
    cfg = load_config(tmp_path / "cfg", environ=config_environ())
    assert cfg.gateway.compression is enabled
    _, secret = mint(cfg)
    async with stand_in_services(tmp_path, [lifecycle_pb2.LEASE_STATE_OPEN]) as addrs, \
            running_edge(cfg, FakeRuntime(), addrs, Burst()) as edge:
        # The client offers permessage-deflate (the websockets default).
        async with connect(edge.url, proxy=None,
                           additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            names = [ext.name for ext in ws.protocol.extensions]
            assert names == (["permessage-deflate"] if enabled else [])
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "burst",
                                      "params": {"n": 3000}}))
            ticks = []
            while True:
                msg = json.loads(await ws.recv())
                if "id" in msg:
                    break
                ticks.append(msg["params"]["i"])
            # The pump drains bursts in order, nothing lost or reordered.
            assert ticks == list(range(3000))
