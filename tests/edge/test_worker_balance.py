"""Edge workers sharing one listening socket: the board and each worker's door.

Real parts: a memfd board, real listening and client TCP sockets, two workers'
doors on one socket (each on its own descriptor of it, as two processes have).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Callable

import pytest

from services.common.worker_board import BoardSlot, WorkerBoard, process_alive
from services.edge.transport.balance import (
    PEER_FRESH_SECS,
    PEER_LATE_SECS,
    SLACK_MIN,
    Balancer,
    compared,
    over_share,
)
from services.edge.transport.gateway import _board


class _Held(asyncio.Protocol):
    """A server-side connection that just stays open."""


def test_the_rule_leaves_a_connection_only_to_a_clearly_less_loaded_sibling() -> None:
    assert not over_share(5, [])  # alone: always accepts
    assert not over_share(3, [3, 9])
    assert not over_share(3, [3 - SLACK_MIN + 1])
    assert over_share(3, [3 - SLACK_MIN])
    assert not over_share(100, [92])  # a tenth of what it holds, above SLACK_MIN
    assert over_share(100, [90])
    # Whatever the counts, the least loaded worker never leaves a connection to others.
    counts = [7, 3, 12, 3]
    least = [i for i, c in enumerate(counts) if c == min(counts)]
    assert all(not over_share(counts[i], counts[:i] + counts[i + 1:]) for i in least)


def test_a_board_holds_each_workers_slot() -> None:
    board = WorkerBoard.create(3)
    try:
        twin = WorkerBoard.adopt(os.dup(board.fileno()))
        assert twin.workers == 3
        board.write(2, pid=os.getpid(), serving=1)
        board.beat(2, 7)
        slot = twin.slot(2)
        assert slot.serving and slot.connections == 7 and slot.pid == os.getpid()
        assert slot.serves(time.monotonic_ns(), 10**9)
        assert not twin.slot(1).serves(time.monotonic_ns(), 10**9)
        board.clear(2)
        assert not twin.slot(2).serving
        twin.release()
        with pytest.raises(ValueError):
            board.slot(4)
    finally:
        board.release()


def test_a_dead_process_does_not_serve() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert process_alive(proc.pid)
        proc.kill()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
        assert not process_alive(proc.pid)
    finally:
        proc.wait()
    assert not process_alive(proc.pid)


def test_a_descriptor_that_is_no_board_is_refused() -> None:
    fd = os.memfd_create("not-a-board")
    os.ftruncate(fd, 64 + 64)
    try:
        with pytest.raises(ValueError):
            WorkerBoard.adopt(fd)
    finally:
        os.close(fd)
    # The edge logs it and serves without the board.
    fd = os.memfd_create("not-a-board")
    os.write(fd, b"x" * 10)
    try:
        assert _board(fd, 1) is None
    finally:
        os.close(fd)


async def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _connections(sock: socket.socket, count: int) -> list[asyncio.StreamWriter]:
    """``count`` client connections to ``sock``, all at once."""
    opened = await asyncio.gather(*(asyncio.open_connection(*sock.getsockname())
                                    for _ in range(count)))
    return [writer for _, writer in opened]


async def _until(check: Callable[[], bool], tries: int = 6000) -> None:
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def test_two_workers_on_one_socket_share_a_burst() -> None:
    board = WorkerBoard.create(2)
    sock = await _listening()
    other = sock.dup()  # worker 2's descriptor of the same socket
    other.setblocking(False)
    one, two = Balancer(board, 1), Balancer(board, 2)
    doors = [one.door(sock, _Held, None, 5.0), two.door(other, _Held, None, 5.0)]
    one.serving(os.getpid())
    two.serving(os.getpid())
    burst = 30
    writers = []
    try:
        writers = await _connections(sock, burst)
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


async def test_a_stale_sibling_is_not_waited_for() -> None:
    board = WorkerBoard.create(2)
    # Worker 2 said it serves with nothing open, then stopped (its heartbeat is old).
    board.write(2, pid=os.getpid(), serving=1, connections=0, heartbeat=1)
    sock = await _listening()
    one = Balancer(board, 1)
    door = one.door(sock, _Held, None, 5.0)
    one.serving(os.getpid())
    writers = []
    try:
        writers = await _connections(sock, 10)
        await _until(lambda: one.connections() == 10)
        assert not one.paused
    finally:
        for w in writers:
            w.close()
        door.close()
        await one.close()
        board.release()


#: How long a busy host held one worker's loop off the CPU mid-burst (measured: over 1 s).
HELD_UP_SECS = 1.5


def _gone_pid() -> int:
    """The pid of a process that ran and was reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_late_sibling_counts_while_its_process_runs_and_until_the_window_ends() -> None:
    now = time.monotonic_ns()
    me = os.getpid()

    def slot(pid: int = me, late_secs: float = 0.0, serving: bool = True) -> BoardSlot:
        return BoardSlot(2, pid, serving, 3, now - int(late_secs * 1e9), 3)

    assert compared(slot(), now)
    # Its loop held off the CPU for a while (a busy host): still compared with.
    assert compared(slot(late_secs=HELD_UP_SECS), now)
    # Late and its process gone: not waited for, though the window is not over.
    assert not compared(slot(pid=_gone_pid(), late_secs=PEER_LATE_SECS * 2), now)
    # Hung past the window: left out even though its process runs.
    assert not compared(slot(late_secs=PEER_FRESH_SECS * 2), now)
    assert not compared(slot(serving=False), now)
    assert not compared(slot(late_secs=-1.0), now)  # a heartbeat from the future


async def _keep_late(board: WorkerBoard, worker: int, pid: int, late_secs: float) -> None:
    """Worker ``worker``'s slot as a loop that is ``late_secs`` behind keeps showing it:
    it serves, holds nothing, and its last heartbeat is always that old."""
    board.write(worker, pid=pid, serving=1, connections=0)
    while True:
        board.write(worker, heartbeat=time.monotonic_ns() - int(late_secs * 1e9))
        await asyncio.sleep(0.01)


async def test_a_burst_waits_for_a_late_sibling_then_is_shared_with_it() -> None:
    board = WorkerBoard.create(2)
    sock = await _listening()
    other = sock.dup()
    other.setblocking(False)
    one, two = Balancer(board, 1), Balancer(board, 2)
    # Worker 2 runs but its loop is held up: its heartbeat is HELD_UP_SECS old.
    late = asyncio.create_task(_keep_late(board, 2, os.getpid(), HELD_UP_SECS))
    doors = [one.door(sock, _Held, None, 5.0)]
    one.serving(os.getpid())
    burst = 12
    writers = []
    try:
        writers = await _connections(sock, burst)
        await _until(lambda: one.paused or one.connections() == burst)
        # Worker 1 took only its slack over the late sibling; the rest wait in the queue.
        assert one.paused and one.connections() == SLACK_MIN
        # Worker 2's loop runs again: it takes the waiting connections, up to its share.
        late.cancel()
        doors.append(two.door(other, _Held, None, 5.0))
        two.serving(os.getpid())
        await _until(lambda: one.connections() + two.connections() == burst)
        assert abs(one.connections() - two.connections()) <= SLACK_MIN
    finally:
        late.cancel()
        for w in writers:
            w.close()
        for door in doors:
            door.close()
        await one.close()
        await two.close()
        board.release()


async def test_a_burst_does_not_wait_for_a_late_sibling_whose_process_is_gone() -> None:
    board = WorkerBoard.create(2)
    sock = await _listening()
    one = Balancer(board, 1)
    late = asyncio.create_task(_keep_late(board, 2, _gone_pid(), PEER_LATE_SECS * 2))
    door = one.door(sock, _Held, None, 5.0)
    one.serving(os.getpid())
    writers = []
    try:
        writers = await _connections(sock, 10)
        await _until(lambda: one.connections() == 10)
        assert not one.paused
    finally:
        late.cancel()
        for w in writers:
            w.close()
        door.close()
        await one.close()
        board.release()


async def test_a_burst_after_a_wave_of_closes_is_weighed_on_what_each_worker_holds_now() -> None:
    board = WorkerBoard.create(2)
    sock = await _listening()
    lost: list[object] = []

    class Tracked(asyncio.Protocol):
        def connection_lost(self, exc: Exception | None) -> None:
            lost.append(self)

    one = Balancer(board, 1)  # no heartbeat task: nothing recounts but the door itself
    door = one.door(sock, Tracked, None, 5.0)
    writers: list[asyncio.StreamWriter] = []
    try:
        writers = await _connections(sock, 10)  # worker 1 alone: it takes them all
        await _until(lambda: board.slot(1).connections == 10)
        for w in writers:
            w.close()
        await _until(lambda: len(lost) == 10)
        assert board.slot(1).connections == 10  # closed, not recounted yet
        # Worker 2 serves, holding nothing; clients reconnect at once.
        board.write(2, pid=os.getpid(), serving=1, connections=0, heartbeat=time.monotonic_ns())
        writers = await _connections(sock, 1)
        await _until(lambda: one.accepted == 11 or one.paused)
        assert not one.paused and board.slot(1).connections == 1
    finally:
        for w in writers:
            w.close()
        door.close()
        board.release()
