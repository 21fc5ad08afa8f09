"""Taking an adapter's pipes over the lifecycle service's fd socket.

Where the edge reaches the lifecycle service over a unix socket and ``[services]
data_path`` is ``"auto"``, its lifecycle backend carries an :class:`FdDialer`
(``LifecycleBackend.fds``): each adapter link then opens its ``Attach`` stream with
``fd_pass`` and redeems the :class:`FdGrant` of the first response here
(:meth:`FdDialer.redeem`), getting the adapter's stdin and stdout
(and what the lifecycle service had read of stdout already) to read and write
itself. The exchange is :mod:`services.common.fd_channel`'s.

A redemption that did not happen (the socket cannot be reached, the lifecycle
service refused) raises :class:`PipesNotTaken`: the stream relays instead. One
that broke after the request went out raises :class:`PipesLost`: whether the
pipes left the lifecycle service is unknown, so the link is given up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass

from services.common.config import Config
from services.common.fd_channel import (
    DATA_PATH_AUTO,
    HANDSHAKE_SECS,
    MAX_MESSAGE_BYTES,
    channel_key,
    encode_request,
    fd_socket_path,
    parse_header,
)
from services.common.fd_sockets import DescriptorsCut, recv_fds
from services.common.grpc_auth import GrpcSecurity

__all__ = ["FdDialer", "FdGrant", "PipesLost", "PipesNotTaken", "TakenPipes"]


@dataclass(frozen=True, slots=True)
class FdGrant:
    """A one-shot permission to take one attach's pipes (``AttachResponse.fd_grant``)."""

    grant_id: str
    #: The attach (counted per lease) the grant is for.
    generation: int

class PipesNotTaken(Exception):
    """The pipes stayed with the lifecycle service: relay over the stream instead."""


class PipesLost(Exception):
    """The exchange broke after the request went out: the link is given up."""


@dataclass
class TakenPipes:
    """An adapter's pipes as the edge holds them (it closes them), and what had been read
    of stdout already: whole ``lines``, then the ``partial`` start of the next one."""

    stdin: int
    stdout: int
    lines: bytes
    partial: bytes
    dropping: bool
    too_long: int

    def close(self) -> None:
        """Close both descriptors (when they are not handed on to transports)."""
        for fd in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                os.close(fd)


class FdDialer:
    """The fd socket of one lifecycle service, and the key grant proofs are made with."""

    def __init__(self, path: str, credential: str) -> None:
        self.path = path
        self._key = channel_key(credential)

    def __repr__(self) -> str:
        return f"FdDialer(path={self.path!r})"  # never the key

    @classmethod
    def of(cls, cfg: Config, lifecycle_addr: str, security: GrpcSecurity | None,
           ) -> FdDialer | None:
        """The dialer for the lifecycle service at ``lifecycle_addr`` (dialled or in this
        process), or None when its pipes cannot come here: ``data_path = "grpc"``, a TCP
        address (another host, docker compose over TCP), no credential to prove with."""
        if cfg.services.data_path != DATA_PATH_AUTO or security is None or not security.token:
            return None
        path = fd_socket_path(lifecycle_addr)
        return cls(path, security.token) if path is not None else None

    async def redeem(self, lease_id: str, grant: FdGrant) -> TakenPipes:
        """The pipes ``grant`` (of ``lease_id``'s attach) stands for: see the module
        docstring for :class:`PipesNotTaken` and :class:`PipesLost`."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            try:
                await asyncio.wait_for(loop.sock_connect(sock, self.path), HANDSHAKE_SECS)
                await loop.sock_sendall(sock, encode_request(
                    self._key, lease_id, grant.generation, grant.grant_id))
            except (OSError, TimeoutError) as exc:
                raise PipesNotTaken(f"fd socket: {type(exc).__name__}: {exc}") from None
            try:
                return await asyncio.wait_for(_answer(loop, sock), HANDSHAKE_SECS)
            except (OSError, TimeoutError, ValueError) as exc:
                raise PipesLost(f"fd socket: {type(exc).__name__}: {exc}") from None
        finally:
            sock.close()


async def _answer(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> TakenPipes:
    """Read the header with its descriptors, then what was read of stdout."""
    try:
        data, fds = await recv_fds(sock, MAX_MESSAGE_BYTES + 1, 2)
    except DescriptorsCut as exc:
        raise ValueError(str(exc)) from None
    head, newline, rest = data.partition(b"\n")
    header = parse_header(head + newline) if newline else None
    if header is None or not header.ok or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        if header is not None and not header.ok:
            raise PipesNotTaken(f"the lifecycle service said: {header.error}")
        raise ValueError("malformed answer")
    pipes = TakenPipes(fds[0], fds[1], b"", b"", header.dropping, header.too_long)
    try:
        need = header.lines + header.partial
        prefix = bytearray(rest)
        while len(prefix) < need:
            chunk = await loop.sock_recv(sock, min(need - len(prefix), 1 << 20))
            if not chunk:
                raise ValueError("the answer ended early")
            prefix += chunk
        if len(prefix) != need:
            raise ValueError("the answer ran long")
        pipes.lines, pipes.partial = bytes(prefix[:header.lines]), bytes(prefix[header.lines:])
    except BaseException:
        pipes.close()
        raise
    return pipes
