"""Binding the gateway's TCP port before anything says it is ready.

``acpgate serve`` binds ``[gateway] host``/``port`` itself, before it starts any
child, and hands the listening sockets to its edge child (``acpgate edge
--listen-fd N``): a port in use ends serve at once with one clear sentence, and a
restarted edge finds the port still its own. ``acpgate edge`` alone binds the
same way before it waits for the services. The sockets are what
``asyncio.create_server`` would make of the host: one per address it resolves to
(``SO_REUSEADDR``, IPv6 ones v6-only), listening, non-blocking.

Blocking (name resolution, bind): run off the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Sequence

from services.common.config import ConfigError
from services.common.in_use import port_in_use

__all__ = ["LISTEN_BACKLOG", "adopt_listeners", "bind_listeners"]

#: Connections the kernel holds for the edge until one is accepted: the system's most
#: (``net.core.somaxconn`` caps it), so a burst waits in the queue while every worker is
#: at its share (``services.edge.transport.balance``) instead of having its SYNs dropped
#: and retried a second or more later.
LISTEN_BACKLOG = socket.SOMAXCONN


def _addresses(host: str, port: int) -> list[tuple[int, int, int, tuple[object, ...]]]:
    """(family, type, proto, sockaddr) for each address ``host`` means, duplicates dropped."""
    try:
        infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                                   0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"[gateway] host {host!r} cannot be resolved: {exc}") from None
    seen: set[tuple[int, tuple[object, ...]]] = set()
    out: list[tuple[int, int, int, tuple[object, ...]]] = []
    for family, kind, proto, _, sockaddr in infos:
        key = (family, tuple(sockaddr))
        if key not in seen:
            seen.add(key)
            out.append((family, kind, proto, tuple(sockaddr)))
    return out


def bind_listeners(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on ``port`` at every address of ``host``.

    A taken port is :class:`~services.common.in_use.AddressInUse` (``port 42617 on
    127.0.0.1 is in use (by pid N)``); any other bind failure a ConfigError naming the
    address. Nothing stays bound when one address fails.
    """
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, sockaddr in _addresses(host, port):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise port_in_use(host, port, str(sockaddr[0])) from None
                raise ConfigError(f"cannot listen on {host or '*'} port {port}: "
                                  f"{exc.strerror or exc}") from None
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def adopt_listeners(fds: Sequence[int]) -> list[socket.socket]:
    """The listening TCP sockets inherited as ``fds`` (``acpgate edge --listen-fd``);
    a ConfigError when one is not a listening stream socket."""
    out: list[socket.socket] = []
    try:
        for fd in fds:
            try:
                sock = socket.socket(fileno=fd)
            except OSError as exc:
                raise ConfigError(f"--listen-fd {fd}: {exc.strerror or exc}") from None
            out.append(sock)
            listening = False
            with contextlib.suppress(OSError):
                listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            if sock.type != socket.SOCK_STREAM or not listening:
                raise ConfigError(f"--listen-fd {fd} is not a listening stream socket")
            sock.set_inheritable(False)
            sock.setblocking(False)
    except BaseException:
        for sock in out:
            sock.detach()  # not ours to close: the caller passed the descriptors
        raise
    return out
