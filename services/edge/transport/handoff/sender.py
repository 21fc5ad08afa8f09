"""The accepting worker's side: pass a client's socket to the sibling that owns it.

:meth:`HandoffSender.hand` takes the connection out of this worker's event loop
(reading stops; what it had read travels along), sends the socket and those
bytes to the owner (:mod:`.wire`) and waits for its answer. Until the owner
accepted, this worker keeps a copy of the socket: an owner that cannot be
reached (restarting) or that refused gets the client a 503 with ``Retry-After``
from here — never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from typing import Final

from services.common.logs import get_logger
from services.edge.transport.handoff.wire import (
    ACCEPTED,
    HANDSHAKE_SECS,
    MAX_PRE_READ,
    encode_header,
    handoff_socket_path,
)

__all__ = ["RETRY_AFTER_SECS", "HandoffSender", "unavailable_response"]

log = get_logger("edge.handoff")

#: What a client told 503 (the owner is restarting) is told to wait, in seconds.
RETRY_AFTER_SECS: Final = 1
#: How long the 503 waits for the client to read it before the socket is closed.
_LINGER_SECS: Final = 2.0


def unavailable_response(worker: int) -> bytes:
    """The 503 a client gets when the worker its connection belongs to cannot take it."""
    body = (f"The acpgate edge worker this connection belongs to (w{worker}) is not "
            f"available (restarting?): retry shortly\n").encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nserver: acpgate\r\n"
            b"retry-after: %d\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (RETRY_AFTER_SECS, len(body), body))


class HandoffSender:
    """Hands connections from worker ``worker`` to its siblings' sockets in ``run_dir``."""

    def __init__(self, run_dir: Path, worker: int, key: bytes) -> None:
        self._run_dir = run_dir
        self.worker = worker
        self._key = key
        self._tasks: set[asyncio.Task[None]] = set()
        #: Connections handed over, and answered 503 instead (metrics, tests).
        self.handed = 0
        self.failed = 0

    def __repr__(self) -> str:
        return f"HandoffSender(worker={self.worker})"  # never the key

    def hand(self, transport: asyncio.Transport, pre_read: bytes, target: int) -> None:
        """Take ``transport``'s connection from this worker and give it to ``target``
        (in the background: the caller forgets the connection now)."""
        transport.pause_reading()
        task = asyncio.create_task(self._hand(transport, pre_read, target),
                                   name="edge-handoff")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hand(self, transport: asyncio.Transport, pre_read: bytes, target: int) -> None:
        loop = asyncio.get_running_loop()
        raw = transport.get_extra_info("socket")
        if raw is None or transport.is_closing():
            transport.abort()
            return
        client = socket.socket(fileno=os.dup(raw.fileno()))
        transport.abort()  # this loop lets go; the dup keeps the connection open
        try:
            client.setblocking(False)
            if await self._send(loop, client, pre_read, target):
                self.handed += 1
                return
            self.failed += 1
            await self._unavailable(loop, client, target)
        except OSError as exc:
            log.info("handoff_client_failed", target=target, why=type(exc).__name__)
        finally:
            client.close()

    async def _send(self, loop: asyncio.AbstractEventLoop, client: socket.socket,
                    pre_read: bytes, target: int) -> bool:
        """True when ``target`` took the connection."""
        path = handoff_socket_path(self._run_dir, target)
        if path is None or len(pre_read) > MAX_PRE_READ:
            return False
        link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        link.setblocking(False)
        try:
            async with asyncio.timeout(HANDSHAKE_SECS):
                await loop.sock_connect(link, path)
                header = encode_header(self._key, self.worker, target, len(pre_read))
                await _send_fd(loop, link, header, client.fileno())
                if pre_read:
                    await loop.sock_sendall(link, pre_read)
                answer = b""
                while b"\n" not in answer and len(answer) < 16:
                    chunk = await loop.sock_recv(link, 16)
                    if not chunk:
                        break
                    answer += chunk
        except (OSError, TimeoutError) as exc:
            log.warning("handoff_failed", target=target, why=type(exc).__name__)
            return False
        finally:
            link.close()
        if answer != ACCEPTED:
            log.warning("handoff_refused", target=target)
            return False
        return True

    async def _unavailable(self, loop: asyncio.AbstractEventLoop, client: socket.socket,
                           target: int) -> None:
        """Answer 503 + Retry-After, then close once the client had its chance to read."""
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(_LINGER_SECS):
                await loop.sock_sendall(client, unavailable_response(target))
                client.shutdown(socket.SHUT_WR)
                while await loop.sock_recv(client, 65536):
                    pass  # what the client still sends is dropped, so close sends no RST

    async def close(self) -> None:
        """Drop the hand-overs under way (their clients' connections close)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _send_fd(loop: asyncio.AbstractEventLoop, link: socket.socket, header: bytes,
                   fd: int) -> None:
    """``sendmsg`` the header with ``fd`` attached, waiting while the socket is full."""
    while True:
        try:
            sent = socket.send_fds(link, [header], [fd])
            break
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(link.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_writer(link.fileno())
    if sent < len(header):
        await loop.sock_sendall(link, header[sent:])


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
