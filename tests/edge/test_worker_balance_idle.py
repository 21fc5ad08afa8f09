"""Edge workers' balancing tick while no connection comes: it slows down (no wake-up
every few tens of milliseconds on an idle host), and the next burst still wakes it and
is still shared between the workers.

Real parts: a memfd board, a real listening socket and client TCP sockets, two workers'
doors on one socket (each on its own descriptor of it, as two processes have).
"""

from __future__ import annotations

import asyncio
import os
import socket

from services.common.worker_board import WorkerBoard
from services.edge.transport.balance import IDLE_TICK_SECS, QUIET_SECS, TICK_SECS, Balancer

#: A quiet spell many fast ticks long.
QUIET_SPELL_SECS = 3 * IDLE_TICK_SECS


class _Held(asyncio.Protocol):
    """A server-side connection that just stays open."""


async def _until(check: object, tries: int = 6000) -> None:
    assert callable(check)
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def test_idle_workers_tick_slowly_and_a_burst_is_still_shared() -> None:
    board = WorkerBoard.create(2)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    other = sock.dup()  # worker 2's descriptor of the same socket
    other.setblocking(False)
    one, two = Balancer(board, 1), Balancer(board, 2)
    doors = [one.door(sock, _Held, None, 5.0), two.door(other, _Held, None, 5.0)]
    one.serving(os.getpid())
    two.serving(os.getpid())
    writers: list[asyncio.StreamWriter] = []
    try:
        await asyncio.sleep(QUIET_SECS + TICK_SECS * 4)  # idle from here on
        ticks = one.ticks + two.ticks
        await asyncio.sleep(QUIET_SPELL_SECS)
        assert one.ticks + two.ticks - ticks <= 2 * (QUIET_SPELL_SECS / IDLE_TICK_SECS + 2), \
            "ticked at the busy pace while idle"

        burst = 30
        opened = await asyncio.gather(*(asyncio.open_connection(*sock.getsockname())
                                        for _ in range(burst)))
        writers = [writer for _, writer in opened]
        await _until(lambda: one.connections() + two.connections() == burst)
        assert one.connections() > 0 and two.connections() > 0
        assert abs(one.connections() - two.connections()) <= burst // 3
    finally:
        for w in writers:
            w.close()
        for door in doors:
            door.close()
        await one.close()
        await two.close()
        board.release()
