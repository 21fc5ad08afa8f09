"""The I/O of acpgate's descriptor-passing unix sockets (``SCM_RIGHTS``).

Two local exchanges hand file descriptors between acpgate's own processes: the
lifecycle service's fd socket (an adapter's pipes to the edge) and an edge
worker's hand-over socket (a client connection to the worker it belongs to). Their
wire formats differ (:mod:`services.common.fd_channel`,
``services.edge.transport.handoff.wire``); binding the socket owner-only, accepting
on it until closed (:class:`FdSocketListener`), telling who is at the other end and
receiving a message with its descriptors are the same, and live here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from services.common.logs import get_logger

__all__ = ["LISTEN_BACKLOG", "DescriptorsCut", "FdSocketListener", "accept_each", "bind_private",
           "peer_uid", "recv_fds"]

log = get_logger("common.fd_sockets")

LISTEN_BACKLOG = 128
#: Descriptors received close-on-exec (where the platform can say so at once).
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


class DescriptorsCut(Exception):
    """A message arrived with its descriptors cut off (``MSG_CTRUNC``); those that did
    arrive are closed."""


def bind_private(path: str) -> socket.socket:
    """A listening, non-blocking unix socket at ``path``, mode 0600 from the moment it
    exists; a stale socket file there is replaced (never another kind of file). Blocking:
    run off the event loop."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(Path(path).lstat().st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)  # owner-only from the moment it exists
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def accept_each(sock: socket.socket,
                      serve: Callable[[socket.socket], Coroutine[Any, Any, None]],
                      exchanges: set[asyncio.Task[None]], *, name: str) -> None:
    """Accept on ``sock`` forever, serving each connection in a task kept in
    ``exchanges`` while it runs; a failed accept (EMFILE and the like) is logged and
    retried."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            conn, _ = await loop.sock_accept(sock)
        except OSError as exc:  # the next accept may do
            log.warning("fd_socket_accept_failed", socket=name, why=str(exc))
            await asyncio.sleep(0.1)
            continue
        task = asyncio.create_task(serve(conn), name=name)
        exchanges.add(task)
        task.add_done_callback(exchanges.discard)


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a unix socket (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class FdSocketListener:
    """A private unix socket at ``path`` whose every connection ``serve`` handles in a
    task of its own (named ``name``), from :meth:`start` until :meth:`close`."""

    def __init__(self, path: str, serve: Callable[[socket.socket], Coroutine[Any, Any, None]],
                 *, name: str) -> None:
        self.path = path
        self._serve = serve
        self._name = name
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._exchanges: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Bind (replacing a stale socket file of a dead run) and begin accepting."""
        self._sock = await asyncio.to_thread(bind_private, self.path)
        self._accepting = asyncio.create_task(
            accept_each(self._sock, self._serve, self._exchanges, name=self._name),
            name=f"{self._name}-accept")

    async def close(self, *, unlink: bool = True) -> None:
        """Stop accepting, drop the exchanges under way, remove the socket file (unless
        ``unlink`` is False: the path may be another process's by now)."""
        tasks = [t for t in (self._accepting, *self._exchanges) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            if unlink:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)


async def recv_fds(sock: socket.socket, max_bytes: int, max_fds: int,
                   ) -> tuple[bytes, list[int]]:
    """One message of at most ``max_bytes`` with at most ``max_fds`` descriptors (not
    inheritable), waiting for the non-blocking ``sock`` to be readable;
    :class:`DescriptorsCut` when the kernel cut descriptors off."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(sock, max_bytes, max_fds, _CLOEXEC)
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())
            continue
        if flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            raise DescriptorsCut("descriptors were cut off")
        for fd in fds:
            os.set_inheritable(fd, False)
        return data, fds


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
