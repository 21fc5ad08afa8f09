"""The owning worker's side: take in a connection a sibling accepted (issue 28).

Listens on this worker's :func:`~.wire.handoff_socket_path` (owner-only, ``0600``,
in the private run dir), one exchange per connection: a peer of another uid is
dropped unread (``SO_PEERCRED``); a header that is malformed, for another
worker, or without the credential's proof is refused and its descriptor closed
unused. Otherwise the client's socket and the bytes the sibling had read go to
``adopt`` — the front door, which resumes the connection as if it had accepted
it — and the sibling is told :data:`~.wire.ACCEPTED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

from services.common.logs import get_logger
from services.common.private_files import private_dir
from services.edge.transport.handoff.wire import (
    ACCEPTED,
    HANDSHAKE_SECS,
    MAX_HEADER_BYTES,
    REFUSED,
    parse_header,
)

__all__ = ["Adopt", "HandoffReceiver"]

log = get_logger("edge.handoff")

#: Takes a client's socket and the bytes already read of it into this worker.
Adopt = Callable[[socket.socket, bytes], Awaitable[None]]
#: recvmsg flag: descriptors received close-on-exec (0 where the platform lacks it).
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
_BACKLOG = 128


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a unix socket (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class HandoffReceiver:
    """Serves worker ``worker``'s hand-over socket at ``path``."""

    def __init__(self, path: str, key: bytes, worker: int, adopt: Adopt) -> None:
        self.path = path
        self._key = key
        self.worker = worker
        self._adopt = adopt
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._exchanges: set[asyncio.Task[None]] = set()
        #: Connections taken in, and hand-overs refused (metrics, tests).
        self.adopted = 0
        self.refused = 0

    def __repr__(self) -> str:
        return f"HandoffReceiver(path={self.path!r})"  # never the key

    async def start(self) -> None:
        """Bind (replacing a stale socket of a dead incarnation), then accept."""
        await asyncio.to_thread(self._bind)
        self._accepting = asyncio.create_task(self._accept(), name="edge-handoff-socket")
        log.info("handoff_socket_listening", worker=self.worker)

    def _bind(self) -> None:
        path = Path(self.path)
        private_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)  # owner-only from the moment it exists
            try:
                sock.bind(self.path)
            finally:
                os.umask(old)
            os.chmod(self.path, 0o600)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:  # EMFILE and the like: the next accept may do
                log.warning("handoff_accept_failed", why=str(exc))
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(self._serve(conn), name="edge-handoff-in")
            self._exchanges.add(task)
            task.add_done_callback(self._exchanges.discard)

    async def _serve(self, conn: socket.socket) -> None:
        client: socket.socket | None = None
        try:
            conn.setblocking(False)
            if peer_uid(conn) != os.getuid():
                log.warning("handoff_foreign_peer")
                return
            async with asyncio.timeout(HANDSHAKE_SECS):
                client, pre_read, sender = await self._receive(conn)
            loop = asyncio.get_running_loop()
            if client is None:
                self.refused += 1
                log.warning("handoff_refused_in")
                await loop.sock_sendall(conn, REFUSED)
                return
            await self._adopt(client, pre_read)
            client = None  # the front door's now
            self.adopted += 1
            log.info("handoff_adopted", sender=sender)
            await loop.sock_sendall(conn, ACCEPTED)
        except (OSError, TimeoutError) as exc:
            log.info("handoff_exchange_failed", why=type(exc).__name__)
        finally:
            if client is not None:
                client.close()
            conn.close()

    async def _receive(self, conn: socket.socket
                       ) -> tuple[socket.socket | None, bytes, int]:
        """The client's socket, what was read of it and the sibling that sends it, or
        ``(None, b"", 0)`` when refused."""
        loop = asyncio.get_running_loop()
        data, fds = await _recv_fds(loop, conn)
        head, newline, rest = data.partition(b"\n")
        header = parse_header(head + newline, self._key, self.worker) if newline else None
        if header is None or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None, b"", 0
        client = socket.socket(fileno=fds[0])
        try:
            if client.type != socket.SOCK_STREAM or client.family not in (
                    socket.AF_INET, socket.AF_INET6):
                raise OSError("not a TCP connection")
            pre_read = bytearray(rest)
            while len(pre_read) < header.pre_read:
                chunk = await loop.sock_recv(conn, min(header.pre_read - len(pre_read), 1 << 20))
                if not chunk:
                    raise OSError("the hand-over ended early")
                pre_read += chunk
            if len(pre_read) != header.pre_read:
                raise OSError("the hand-over ran long")
        except BaseException:
            client.close()
            raise
        return client, bytes(pre_read), header.sender

    async def close(self) -> None:
        """Stop accepting, drop the exchanges under way, remove the socket."""
        tasks = [t for t in (self._accepting, *self._exchanges) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)


async def _recv_fds(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                    ) -> tuple[bytes, list[int]]:
    """One ``recvmsg`` with at most one descriptor, waiting for the socket to be readable."""
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(sock, MAX_HEADER_BYTES + 1, 1, _CLOEXEC)
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
            return b"", []
        for fd in fds:
            os.set_inheritable(fd, False)
        return data, fds


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
