"""The lifecycle service's fd socket: where an attached edge takes an adapter's pipes.

Listens on :func:`services.common.fd_channel.fd_socket_path` of the service's
unix address (owner-only), one exchange per connection
(:mod:`services.common.fd_channel`): a peer of another uid is dropped unread
(``SO_PEERCRED``); a request that is malformed, names no open grant, lacks the
credential's proof or comes after its attach ended is refused; otherwise the
channel hands its pipes over (:meth:`~services.lifecycle.attach.channel.AdapterChannel.hand_over`)
and they go to the peer with ``SCM_RIGHTS``, followed by what had been read of
stdout. The grant's stream switches to carrying only the exit at the hand-over
(``FdGrant.redeemed``); a send that then fails half-way leaves the peer without
whole pipes, and the edge gives that link up (``PipesLost``), which ends the stream.
"""

from __future__ import annotations

import asyncio
import os
import socket

from services.common.fd_channel import (
    HANDSHAKE_SECS,
    MAX_MESSAGE_BYTES,
    FdHeader,
    encode_header,
    parse_request,
)
from services.common.fd_sockets import FdSocketListener, peer_uid
from services.common.logs import get_logger
from services.lifecycle.attach.channel import Handover
from services.lifecycle.attach.fd_grants import FdGrants

__all__ = ["FdServer"]

log = get_logger("lifecycle.fds")

#: Connections waiting to be accepted.
#: What a refused request is told (never why: a caller probing the socket learns nothing).
REFUSED = "refused"
#: Told when the grant was good but the pipes cannot go now (the stream goes on instead).
NOT_NOW = "the adapter's pipes cannot be handed over now"


class FdServer:
    """Serves the fd socket of one lifecycle service."""

    def __init__(self, path: str, grants: FdGrants) -> None:
        self.path = path
        self.grants = grants
        self._listener = FdSocketListener(path, self._serve, name="fd-exchange")

    async def start(self) -> None:
        """Bind (replacing a stale socket file of a dead run) and begin accepting."""
        await self._listener.start()
        log.info("fd_socket_listening")

    async def _serve(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(False)
            if peer_uid(conn) != os.getuid():
                log.warning("fd_socket_foreign_peer")
                return
            await asyncio.wait_for(self._exchange(conn), HANDSHAKE_SECS)
        except (OSError, TimeoutError) as exc:
            log.info("fd_exchange_failed", why=f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    async def _exchange(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        raw = b""
        while b"\n" not in raw and len(raw) <= MAX_MESSAGE_BYTES:
            chunk = await loop.sock_recv(conn, MAX_MESSAGE_BYTES + 1)
            if not chunk:
                return
            raw += chunk
        request = parse_request(raw)
        grant = self.grants.redeem(request) if request is not None else None
        if grant is None:
            log.warning("fd_grant_refused", known_request=request is not None)
            await loop.sock_sendall(conn, encode_header(FdHeader(False, error=REFUSED)))
            return
        handover = grant.channel.hand_over()
        if handover is None:
            await loop.sock_sendall(conn, encode_header(FdHeader(False, error=NOT_NOW)))
            return
        # From here the pipes are the peer's: the stream relays no more.
        grant.redeemed.set_result(None)
        try:
            await self._send(conn, handover)
        finally:
            handover.close()
        log.info("fd_pipes_handed_over", lease_id=grant.lease_id, generation=grant.generation)

    async def _send(self, conn: socket.socket, handover: Handover) -> None:
        loop = asyncio.get_running_loop()
        out = handover.stdout
        header = encode_header(FdHeader(True, len(out.lines), len(out.partial), out.dropping,
                                        out.too_long))
        while True:
            try:
                socket.send_fds(conn, [header], [handover.stdin, out.fd])
                break
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(conn.fileno(), ready.set_result, None)
                try:
                    await ready
                finally:
                    loop.remove_writer(conn.fileno())
        if out.lines or out.partial:
            await loop.sock_sendall(conn, out.lines + out.partial)

    async def close(self) -> None:
        """Stop accepting, drop the exchanges under way, remove the socket."""
        await self._listener.close()
