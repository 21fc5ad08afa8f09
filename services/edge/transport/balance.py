"""Edge workers share the port's connections evenly: each takes only its share.

Every worker of ``acpgate serve`` accepts on the one listening socket, and the
kernel wakes them all for each new connection: whichever calls ``accept()`` first
takes it — and asyncio's own accept loop then takes up to a hundred more at once,
so a burst lands mostly on one worker. Here a worker accepts on its own terms,
one connection at a time, and before each it reads the board
(:mod:`services.common.worker_board`): while it holds at least
:data:`SLACK_MIN` (or a tenth) more connections than the least loaded live
sibling, it closes its door (stops watching the socket) and leaves the connection
to the siblings; it opens again as soon as that is no longer so (checked every
:data:`TICK_SECS`, when it also writes its heartbeat and count). With its door open and
no connection for :data:`QUIET_SECS` the tick slows to :data:`IDLE_TICK_SECS` (well
within :data:`PEER_FRESH_SECS`: siblings still compare with it), and the next connection
wakes it at once. Each wake-up of
the door first drops the connections closed since (:data:`RECOUNT_SECS`), so
clients that reconnect right after a wave of closes are not weighed against
connections that are gone.

Why this and not another: ``SO_REUSEPORT`` spreads by a hash (uneven over a few
hundred connections) and lets other processes bind the port; ``EPOLLEXCLUSIVE``
wakes the most recent waiter first (uneven too, and not reachable from asyncio);
handing excess connections to siblings moves each one twice. Pausing is cheap
and safe: the least loaded live worker never pauses, so some worker always
accepts. A sibling whose heartbeat is late is still compared with while its
process runs, up to :data:`PEER_FRESH_SECS`: on a busy host a worker's loop can
be held off the CPU for a second or more mid-burst, and leaving it out then
hands its whole share to the others for good (the burst is over when it comes
back), while waiting for it only holds the next connections in the queue for as
long as it is late. A sibling that hangs is left out once its heartbeat is older
than that, and one whose process is gone (dead, a zombie) as soon as its
heartbeat is late (serve also clears a dead worker's slot at once), so nobody
waits on it for long. Connections not yet accepted wait in the socket's queue,
as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, Final

from services.common.logs import get_logger
from services.common.worker_board import BoardSlot, WorkerBoard, process_alive

__all__ = ["IDLE_TICK_SECS", "PEER_FRESH_SECS", "PEER_LATE_SECS", "QUIET_SECS", "RECOUNT_SECS",
           "SLACK_MIN", "TICK_SECS",
           "BalancedDoor", "Balancer", "compared", "over_share"]

log = get_logger("edge.balance")

#: How often a worker writes its heartbeat and count, and a closed door looks again.
TICK_SECS: Final = 0.05
#: With the door open and no connection for this long, the worker is idle…
QUIET_SECS: Final = 1.0
#: … and ticks this often (its heartbeat stays well within :data:`PEER_FRESH_SECS`).
IDLE_TICK_SECS: Final = 1.0
#: A sibling whose heartbeat is older than this is not compared with (hung, stopped).
PEER_FRESH_SECS: Final = 3.0
#: A sibling whose heartbeat is older than this is compared with only while its process runs.
PEER_LATE_SECS: Final = 0.25
#: A worker closes its door at this many connections above the least loaded sibling…
SLACK_MIN: Final = 2
#: … or at this fraction of what it holds, when that is more.
SLACK_FRACTION: Final = 0.1
#: A wake-up of the door first drops the connections closed since the last recount, and
#: publishes the count, unless that recount is younger than this (it costs a pass over
#: the connections held): a burst that follows a wave of closes (clients reconnecting)
#: is weighed on what each worker holds now, not at its last tick.
RECOUNT_SECS: Final = 0.005
#: Connections accepted per wake-up at most (then the loop serves the others).
ACCEPT_BATCH: Final = 8
#: After running out of descriptors (EMFILE…), how long the door stays closed.
_ACCEPT_BACKOFF_SECS: Final = 1.0
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def over_share(own: int, siblings: list[int]) -> bool:
    """Whether a worker holding ``own`` connections leaves the next one to its live
    ``siblings`` (their counts): only when one of them holds clearly fewer."""
    if not siblings:
        return False
    return own >= min(siblings) + max(SLACK_MIN, int(own * SLACK_FRACTION))


def compared(slot: BoardSlot, now_ns: int) -> bool:
    """Whether a sibling's ``slot`` counts in the comparison at ``now_ns``: it serves, and
    its heartbeat is recent — or only late (its loop held up) while its process runs."""
    if not (slot.serving and slot.sane() and slot.fresh(now_ns, int(PEER_FRESH_SECS * 1e9))):
        return False
    return slot.fresh(now_ns, int(PEER_LATE_SECS * 1e9)) or process_alive(slot.pid)


class Balancer:
    """Worker ``worker``'s side of the board: its count, heartbeat and door state."""

    def __init__(self, board: WorkerBoard, worker: int) -> None:
        self.board = board
        self.worker = worker
        self._transports: set[asyncio.BaseTransport] = set()
        #: Connections accepted whose transport is still being set up (TLS handshake).
        self.setting_up = 0
        self._doors: list[BalancedDoor] = []
        self._ticker: asyncio.Task[None] | None = None
        self.paused = False
        self.accepted = 0
        self._recounted_at = 0.0
        #: When a connection last woke a door (monotonic), and the event that wakes an
        #: idle tick.
        self._active_at = time.monotonic()
        self._woken = asyncio.Event()
        #: Turns of the tick (tests count them over a quiet spell).
        self.ticks = 0

    def connections(self) -> int:
        """The TCP connections this worker holds (a closed one counts until the next recount)."""
        return len(self._transports) + self.setting_up

    def track(self, transport: asyncio.BaseTransport) -> None:
        """Count ``transport`` (a connection accepted here or handed in) while it is open."""
        self._transports.add(transport)
        self.board.write(self.worker, connections=self.connections())

    def over_share(self) -> bool:
        """Whether a live sibling holds clearly fewer connections than this worker."""
        slots = self.board.slots()
        now = time.monotonic_ns()  # after reading: no heartbeat read is newer than it
        siblings = [s.connections for s in slots
                    if s.worker != self.worker and compared(s, now)]
        return over_share(self.connections(), siblings)

    def serving(self, pid: int) -> None:
        """This worker serves: say so on the board and start the heartbeat."""
        self.board.beat(self.worker, self.connections())
        self.board.write(self.worker, pid=pid, serving=1)
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick(), name="edge-balance")

    def door(self, sock: socket.socket, factory: Callable[[], asyncio.Protocol],
             tls: ssl.SSLContext | None, handshake_secs: float) -> BalancedDoor:
        """A door for ``sock`` that accepts only while this worker is within its share."""
        door = BalancedDoor(self, sock, factory, tls, handshake_secs)
        self._doors.append(door)
        return door

    def woke(self) -> None:
        """A door woke for a connection: tick at :data:`TICK_SECS` again (at once)."""
        self._active_at = time.monotonic()
        self._woken.set()

    def recount(self) -> None:
        """Drop the connections closed meanwhile from the count and publish it, unless
        that was done less than :data:`RECOUNT_SECS` ago."""
        if time.monotonic() - self._recounted_at >= RECOUNT_SECS:
            self._sweep()
            self.board.write(self.worker, connections=self.connections())

    def _sweep(self) -> None:
        self._transports = {t for t in self._transports if not t.is_closing()}
        self._recounted_at = time.monotonic()

    async def _tick(self) -> None:
        while True:
            self._sweep()
            self.board.beat(self.worker, self.connections())
            if self.paused and not self.over_share():
                self._set_paused(False)
            self.ticks += 1
            if self.paused or time.monotonic() - self._active_at < QUIET_SECS:
                await asyncio.sleep(TICK_SECS)
                continue
            self._woken.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), IDLE_TICK_SECS)

    def _set_paused(self, paused: bool) -> None:
        if paused != self.paused:
            self.paused = paused
            for door in self._doors:
                door.watch(not paused)

    def pause(self) -> None:
        """Close every door until the next tick finds this worker within its share."""
        self._set_paused(True)

    async def close(self) -> None:
        """Stop the heartbeat; the slot says this worker no longer serves."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None
        self.board.write(self.worker, serving=0)


class BalancedDoor:
    """One listening socket's accept loop, standing in for the ``asyncio.Server`` that
    ``websockets`` wraps (``close``, ``wait_closed``, ``is_serving``, ``sockets``)."""

    def __init__(self, balancer: Balancer, sock: socket.socket,
                 factory: Callable[[], asyncio.Protocol], tls: ssl.SSLContext | None,
                 handshake_secs: float) -> None:
        self._balancer = balancer
        self._sock = sock
        self._factory = factory
        self._tls = tls
        self._handshake_secs = handshake_secs
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._watching = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.watch(not balancer.paused)

    # ------------------------------------------------------------ asyncio.Server's face

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening socket (none once closed)."""
        return () if self._closed else (self._sock,)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop this door accepts on."""
        return self._loop

    def is_serving(self) -> bool:
        """True until :meth:`close` (a door closed for the share still serves)."""
        return not self._closed

    async def start_serving(self) -> None:
        """Serving from the start: nothing to do."""

    def close(self) -> None:
        """Accept nothing more and close this process's copy of the listening socket."""
        if not self._closed:
            self.watch(False)
            self._closed = True
            self._sock.close()

    async def wait_closed(self) -> None:
        """Wait for the connections still being set up (a TLS handshake)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------ accepting

    def watch(self, on: bool) -> None:
        """Watch the socket for connections (or stop)."""
        if self._closed or on == self._watching:
            return
        self._watching = on
        if on:
            self._loop.add_reader(self._sock.fileno(), self._readable)
        else:
            self._loop.remove_reader(self._sock.fileno())

    def _readable(self) -> None:
        balancer = self._balancer
        balancer.woke()
        balancer.recount()
        try:
            self._accept_some()
        finally:
            balancer.board.write(balancer.worker, accepted=balancer.accepted)

    def _accept_some(self) -> None:
        balancer = self._balancer
        for _ in range(ACCEPT_BATCH):
            if balancer.over_share():
                balancer.pause()
                return
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # a sibling took it
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    log.warning("edge_accept_backoff", why=errno.errorcode.get(exc.errno or 0, "?"))
                    self.watch(False)
                    self._loop.call_later(_ACCEPT_BACKOFF_SECS, self._after_backoff)
                    return
                continue  # the client gave up before accept (ECONNABORTED…)
            balancer.accepted += 1
            self._connect(conn)

    def _after_backoff(self) -> None:
        self.watch(not self._balancer.paused)

    def _connect(self, conn: socket.socket) -> None:
        balancer = self._balancer
        balancer.setting_up += 1
        task = self._loop.create_task(self._serve(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        balancer = self._balancer
        transport: asyncio.BaseTransport | None = None
        try:
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            extra: dict[str, Any] = {}
            if self._tls is not None:
                extra = {"ssl": self._tls, "ssl_handshake_timeout": self._handshake_secs}
            transport, _ = await self._loop.connect_accepted_socket(self._factory, conn, **extra)
        except Exception as exc:  # a failed TLS handshake, a reset: this connection only
            log.debug("edge_accept_failed", why=type(exc).__name__)
            conn.close()
        finally:
            balancer.setting_up -= 1
        if transport is not None:  # counted once: no longer as one being set up
            balancer.track(transport)
