"""From the attacker's side: the edge workers' board (shared memory between serve's
edge workers).

The board is an anonymous memfd: no path in any filesystem, reachable only through
the descriptor serve hands its edge workers. What a worker reads there is checked
before it counts: a torn, corrupt or forged slot — negative counts, a heartbeat
from the future, a PID that is not a process — can neither stop a worker from
accepting connections (which would leave the port's queue unserved) nor make
``/healthz`` count a worker that does not serve.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import psutil
import pytest

from services.common.worker_board import WorkerBoard
from services.edge.transport.balance import Balancer
from tests.gateway.workers_serve import serve_workers

_FUTURE = 10**18  # ns: a heartbeat "fresh" for centuries


class _Accepted(asyncio.Protocol):
    def __init__(self, made: asyncio.Event) -> None:
        self._made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made.set()


@pytest.mark.timeout(60)
async def test_a_forged_sibling_slot_cannot_stop_a_worker_accepting() -> None:
    board = WorkerBoard.create(2)
    # A sibling slot claiming to serve with fewer than no connections, forever fresh.
    board.write(2, pid=os.getpid(), serving=1, connections=-1000, heartbeat=_FUTURE)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    made = asyncio.Event()
    worker = Balancer(board, 1)
    door = worker.door(sock, lambda: _Accepted(made), None, 5.0)
    worker.serving(os.getpid())
    writer = None
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname())
        await made.wait()  # accepted here: the forged slot was not compared with
        assert not worker.paused
    finally:
        if writer is not None:
            writer.close()
        door.close()
        await worker.close()
        board.release()


def test_a_forged_slot_does_not_count_as_serving() -> None:
    board = WorkerBoard.create(3)
    try:
        now = time.monotonic_ns()
        board.write(1, pid=0, serving=1, connections=0, heartbeat=now)  # no process
        board.write(2, pid=os.getpid(), serving=1, connections=-1, heartbeat=now)  # corrupt
        board.write(3, pid=os.getpid(), serving=1, connections=0, heartbeat=_FUTURE)
        assert [s.serves(time.monotonic_ns(), 10**10) for s in board.slots()] == [False] * 3
    finally:
        board.release()


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_the_board_has_no_path_and_only_the_edge_workers_hold_it(tmp_path: Path) -> None:
    async with serve_workers(tmp_path) as served:
        holders: dict[str, list[int]] = {}
        tree = [psutil.Process(served.proc.pid), *psutil.Process(served.proc.pid).children(True)]
        for proc in tree:
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                except OSError:
                    continue
                if "acpgate-edge-board" in target:
                    assert target.startswith("/memfd:"), target  # no file anyone could open
                    holders.setdefault(" ".join(proc.cmdline()[-6:]), []).append(proc.pid)
        workers = {p.pid for p in served.workers().values()}
        held_by = {pid for pids in holders.values() for pid in pids}
        assert held_by == workers | {served.proc.pid}, holders
        # Nothing under the install's directories is the board.
        for root in (served.cfg.data_dir, served.cfg.config_dir):
            assert not [name for _, _, names in os.walk(root) for name in names
                        if "board" in name]
