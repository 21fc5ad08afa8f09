"""The edge workers' board: what each worker of one ``acpgate serve`` is doing, now.

``acpgate serve`` with ``[gateway] workers`` above one makes a small anonymous
shared memory region (``memfd``: no name in any filesystem, reachable only through
the descriptor) and hands it to every edge worker with ``--board-fd``, as it hands
the listening sockets. Each worker writes its own slot, nobody else's:

- ``pid`` and ``serving`` — set once its listeners accept and its services answer;
- ``connections`` — the TCP connections it holds (accepted here or handed in);
- ``heartbeat`` — ``CLOCK_MONOTONIC`` nanoseconds, refreshed every few tens of ms
  while its event loop runs (a stopped or stuck worker's goes stale);
- ``accepted`` — connections its door accepted so far.

serve clears a slot when its worker exits, and reads the board to log
``serve_ready`` only when every worker serves; a worker reads it to answer
``/healthz`` for the host and to decide whether to take the next connection
(``services.edge.transport.balance``). Writes are single aligned 8-byte stores;
a reader checks every value it reads (a torn or nonsense slot counts as a worker
that is not serving), so nothing read from the board can crash or stall a reader.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from typing import Final

__all__ = ["BOARD_MAGIC", "MAX_WORKERS", "BoardSlot", "WorkerBoard", "process_alive"]

#: The header's first word: the layout's name and version.
BOARD_MAGIC: Final = 0x61637067_626F6431  # "acpgbod1"
#: The most workers a board holds (``[gateway] workers`` is far below).
MAX_WORKERS: Final = 1024
_WORD: Final = struct.Struct("<q")
#: One slot per cache line: pid, serving, connections, heartbeat, accepted.
_SLOT_BYTES: Final = 64
_FIELDS: Final = ("pid", "serving", "connections", "heartbeat", "accepted")
_HEADER_BYTES: Final = 64


@dataclass(frozen=True)
class BoardSlot:
    """One worker's slot as read."""

    worker: int
    pid: int
    serving: bool
    connections: int
    heartbeat: int
    accepted: int

    def fresh(self, now_ns: int, within_ns: int) -> bool:
        """Whether the heartbeat is at most ``within_ns`` old (and not from the future)."""
        return 0 < self.heartbeat <= now_ns + 1_000_000 and now_ns - self.heartbeat <= within_ns

    def serves(self, now_ns: int, within_ns: int) -> bool:
        """Whether this worker serves: it said so, its heartbeat is at most ``within_ns``
        old and its process runs (a killed worker's slot says it until serve clears it)."""
        return self.serving and self.sane() and self.fresh(now_ns, within_ns) \
            and process_alive(self.pid)

    def sane(self) -> bool:
        """Whether every value is one a worker writes (a torn or forged one is not)."""
        return 0 < self.pid < 1 << 31 and 0 <= self.connections < 1 << 40 \
            and 0 <= self.accepted < 1 << 62 and self.heartbeat > 0


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie — dead, not yet reaped — does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
        return state != [b"Z"] and state != [b"X"]
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerBoard:
    """The shared slots of workers 1…``workers`` (see the module docstring)."""

    def __init__(self, fd: int, memory: mmap.mmap, workers: int) -> None:
        self._fd = fd
        self._mem = memory
        self.workers = workers

    @classmethod
    def create(cls, workers: int) -> WorkerBoard:
        """A new zeroed board for ``workers`` workers (serve's; its descriptor inheritable
        only where passed explicitly)."""
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"a board holds 1 to {MAX_WORKERS} workers, not {workers}")
        size = _HEADER_BYTES + workers * _SLOT_BYTES
        fd = os.memfd_create("acpgate-edge-board", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            memory = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        _WORD.pack_into(memory, 0, BOARD_MAGIC)
        _WORD.pack_into(memory, 8, workers)
        return cls(fd, memory, workers)

    @classmethod
    def adopt(cls, fd: int) -> WorkerBoard:
        """The board inherited as ``fd`` (``acpgate edge --board-fd``); ValueError when it is
        not one (wrong size, header or count). The descriptor is not passed on further."""
        size = os.fstat(fd).st_size
        if not _HEADER_BYTES + _SLOT_BYTES <= size <= _HEADER_BYTES + MAX_WORKERS * _SLOT_BYTES:
            raise ValueError(f"--board-fd {fd} is not an edge worker board (size {size})")
        os.set_inheritable(fd, False)
        memory = mmap.mmap(fd, size)
        magic, workers = _WORD.unpack_from(memory, 0)[0], _WORD.unpack_from(memory, 8)[0]
        if magic != BOARD_MAGIC or not 1 <= workers <= MAX_WORKERS \
                or size != _HEADER_BYTES + workers * _SLOT_BYTES:
            memory.close()
            raise ValueError(f"--board-fd {fd} is not an edge worker board")
        return cls(fd, memory, workers)

    def fileno(self) -> int:
        """The descriptor serve passes to each worker."""
        return self._fd

    def _offset(self, worker: int, name: str) -> int:
        if not 1 <= worker <= self.workers:
            raise ValueError(f"no worker {worker} on a board of {self.workers}")
        return _HEADER_BYTES + (worker - 1) * _SLOT_BYTES + 8 * _FIELDS.index(name)

    def write(self, worker: int, **values: int) -> None:
        """Set fields of ``worker``'s slot (``pid=…, serving=1, …``)."""
        for name, value in values.items():
            _WORD.pack_into(self._mem, self._offset(worker, name), int(value))

    def beat(self, worker: int, connections: int) -> None:
        """The worker's heartbeat, with its connections now."""
        self.write(worker, connections=connections, heartbeat=time.monotonic_ns())

    def clear(self, worker: int) -> None:
        """Empty ``worker``'s slot (its process exited)."""
        self.write(worker, pid=0, serving=0, connections=0, heartbeat=0, accepted=0)

    def slot(self, worker: int) -> BoardSlot:
        """``worker``'s slot as it reads now."""
        values = [_WORD.unpack_from(self._mem, self._offset(worker, n))[0] for n in _FIELDS]
        pid, serving, connections, heartbeat, accepted = values
        return BoardSlot(worker, pid, serving == 1, connections, heartbeat, accepted)

    def slots(self) -> list[BoardSlot]:
        """Every worker's slot, 1…N."""
        return [self.slot(n) for n in range(1, self.workers + 1)]

    def release(self) -> None:
        """Unmap and close the descriptor (serve's at its stop; a worker's at exit)."""
        self._mem.close()
        os.close(self._fd)
