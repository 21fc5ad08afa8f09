"""The owning worker's side: take in a connection a sibling accepted.

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
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from services.common.fd_sockets import DescriptorsCut, FdSocketListener, peer_uid, recv_fds
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


class HandoffReceiver:
    """Serves worker ``worker``'s hand-over socket at ``path``."""

    def __init__(self, path: str, key: bytes, worker: int, adopt: Adopt) -> None:
        self.path = path
        self._key = key
        self.worker = worker
        self._adopt = adopt
        self._listener = FdSocketListener(path, self._serve, name="edge-handoff-in")
        #: Connections taken in, and hand-overs refused (metrics, tests).
        self.adopted = 0
        self.refused = 0

    def __repr__(self) -> str:
        return f"HandoffReceiver(path={self.path!r})"  # never the key

    async def start(self) -> None:
        """Bind (replacing a stale socket of a dead incarnation), then accept."""
        await asyncio.to_thread(private_dir, Path(self.path).parent)
        await self._listener.start()
        log.info("handoff_socket_listening", worker=self.worker)

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
        try:
            data, fds = await recv_fds(conn, MAX_HEADER_BYTES + 1, 1)
        except DescriptorsCut:
            return None, b"", 0
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
        await self._listener.close()
