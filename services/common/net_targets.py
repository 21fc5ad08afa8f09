"""Where a gateway client's HTTP/SSE MCP server may point: public addresses, or what is allowed.

An ``mcpServers`` entry of a remote client names a URL that acpgate's own
processes connect to: pointed at ``http://127.0.0.1:<port>/…`` or a private
address it would make the gateway host a proxy into its own network (issue 23).
So every address the URL's host resolves to must be a global one — not
loopback, link-local, private (RFC 1918, ULA), shared (CGNAT ``100.64/10``),
unspecified, multicast or otherwise reserved — unless ``[gateway]
client_mcp_allow_hosts`` lists the host name, the address or a network holding it.

The edge checks the URL before anything is created; the built-in agent checks
again on the address it actually connects to (a name may resolve differently
by then: DNS rebinding), see ``services/agent/mcp/http_guard.py``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from services.common.client_mcp import (
    MCP_WHY_ADDRESS,
    MCP_WHY_UNRESOLVED,
)

__all__ = [
    "HostAllowList",
    "Resolver",
    "TargetRefused",
    "address_kind",
    "checked_addresses",
    "system_resolver",
    "url_target",
]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: ``(host, port) -> the addresses it resolves to`` (text form); injectable for tests.
Resolver = Callable[[str, int], Awaitable[list[str]]]

#: How long one name may take to resolve before the target counts as unresolvable.
RESOLVE_TIMEOUT_SECS = 10.0

_PRIVATE = tuple(ipaddress.ip_network(n) for n in
                 ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


class TargetRefused(OSError):
    """A target a gateway client may not reach; ``str(exc)`` is the sentence saying why."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "refused"


def _embedded_v4(ip: IpAddress) -> IpAddress:
    """The IPv4 address an IPv6 one stands for, if it carries one; else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_kind(ip: IpAddress) -> str | None:
    """What kind of non-public address ``ip`` is ("loopback", "private", …); None if global.

    An IPv6 address that carries an IPv4 one (mapped ``::ffff:127.0.0.1``, NAT64
    ``64:ff9b::7f00:1``, 6to4 ``2002:7f00:1::``) is judged by that IPv4 address.
    """
    ip = _embedded_v4(ip)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if any(ip in net for net in _PRIVATE if net.version == ip.version):
        return "private"
    if ip.version == 4 and ip in _SHARED:
        return "shared (CGNAT)"
    if not ip.is_global:
        return "reserved"
    return None


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


@dataclass(frozen=True)
class HostAllowList:
    """``[gateway] client_mcp_allow_hosts``: host names, addresses and networks allowed anyway."""

    names: frozenset[str] = frozenset()
    networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> HostAllowList:
        """The list from config; ``ValueError`` naming the first entry that is none of the three."""
        names: set[str] = set()
        networks: list[IpNetwork] = []
        for entry in entries:
            text = entry.strip()
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
                continue
            except ValueError:
                pass
            name = _normal_host(text)
            if not _HOST_NAME.match(name):
                raise ValueError(f"{entry!r} is not a host name, an IP address or a CIDR network")
            names.add(name)
        return cls(frozenset(names), tuple(networks))

    def allows(self, host: str, ip: IpAddress) -> bool:
        """True when ``host`` is listed by name, or ``ip`` lies in a listed network."""
        if _normal_host(host) in self.names:
            return True
        return any(a in net for a in {ip, _embedded_v4(ip)} for net in self.networks
                   if net.version == a.version)


def url_target(url: str) -> tuple[str, int]:
    """``(host, port)`` of an http(s) URL (the scheme's default port when none is given)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    return host, port if port is not None else (443 if parts.scheme == "https" else 80)


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to with the system resolver (in its thread pool)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


async def _resolve(host: str, port: int, resolve: Resolver) -> list[IpAddress]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_SECS):
            found = await resolve(host, port)
    except TimeoutError:
        raise TargetRefused(MCP_WHY_UNRESOLVED.format(host=host, reason="timed out")) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TargetRefused(MCP_WHY_UNRESOLVED.format(host=host, reason=reason)) from None
    addresses = [a for a in (_literal(text) for text in found) if a is not None]
    if not addresses:
        raise TargetRefused(MCP_WHY_UNRESOLVED.format(host=host, reason="no address"))
    return addresses


async def checked_addresses(host: str, port: int, allow: HostAllowList,
                            resolve: Resolver = system_resolver) -> list[str]:
    """Every address ``host`` resolves to, when each one may be reached; else
    :class:`TargetRefused` with the sentence naming the first that may not.

    An IP literal is not resolved. Every address must pass, not just one: a
    connection may go to any of them.
    """
    addresses = await _resolve(host, port, resolve)
    for ip in addresses:
        kind = address_kind(ip)
        if kind is not None and not allow.allows(host, ip):
            target = host if _literal(host) is not None else f"{host} ({ip})"
            raise TargetRefused(MCP_WHY_ADDRESS.format(target=target, what=kind))
    return [str(ip) for ip in addresses]
