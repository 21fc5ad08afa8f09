"""Where a gateway client's HTTP/SSE MCP server may point: public addresses, or what is allowed.

An ``mcpServers`` entry of a remote client names a URL that acpgate's own
processes connect to: pointed at ``http://127.0.0.1:<port>/…`` or a private
address it would make the gateway host a proxy into its own network.
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
    "embedded_v4",
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
#: IPv6 ranges whose last 32 bits are an IPv4 address: IPv4-compatible (``::/96``, but
#: ``::`` and ``::1``), IPv4-mapped, IPv4-translated (SIIT), NAT64's well-known prefix.
_LOW_V4 = tuple(ipaddress.ip_network(n) for n in
                ("::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")
#: NAT64's local-use prefix (RFC 8215): its length, hence where the IPv4 sits, is the network's.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


class TargetRefused(OSError):
    """A target a gateway client may not reach; ``str(exc)`` is the sentence saying why."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "refused"


def _rfc6052_candidates(packed: bytes) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 address of a ``64:ff9b:1::/48`` address for each prefix length it may have
    (RFC 6052 §2.2: /96, /64, /56, /48; bits 64–71 are never the address's)."""
    return tuple(ipaddress.IPv4Address(b) for b in (
        packed[12:16], packed[9:13], packed[7:8] + packed[9:12], packed[6:8] + packed[9:11]))


def embedded_v4(ip: IpAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 one carries (empty when it carries none): the last 32
    bits of IPv4-compatible, -mapped and -translated addresses and of NAT64's well-known
    prefix, 6to4's, Teredo's server and (de-obfuscated) client, and every place NAT64's
    local-use prefix may hold one."""
    if isinstance(ip, ipaddress.IPv4Address) or ip.is_unspecified or ip.is_loopback:
        return ()
    if any(ip in net for net in _LOW_V4):
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    if ip in _SIX_TO_FOUR:
        return (ipaddress.IPv4Address(ip.packed[2:6]),)
    if ip in _TEREDO:
        return (ipaddress.IPv4Address(ip.packed[4:8]),
                ipaddress.IPv4Address(int.from_bytes(ip.packed[12:16], "big") ^ 0xFFFFFFFF))
    if ip in _NAT64_LOCAL:
        return _rfc6052_candidates(ip.packed)
    return ()


def address_kind(ip: IpAddress) -> str | None:
    """What kind of non-public address ``ip`` is ("loopback", "private", …); None if global.

    An IPv6 address that carries IPv4 ones (:func:`embedded_v4`: ``::127.0.0.1``,
    ``::ffff:127.0.0.1``, NAT64 ``64:ff9b::7f00:1``, 6to4 ``2002:7f00:1::``, Teredo) is
    judged by them: one that is not public says what it is (where there are several
    candidates, a zero or reserved one is named only when nothing more telling is).
    """
    if embedded := embedded_v4(ip):
        kinds = [kind for kind in map(_kind, embedded) if kind is not None]
        telling = [kind for kind in kinds if kind not in ("unspecified", "reserved")]
        return (telling or kinds)[0] if kinds else None
    return _kind(ip)


def _kind(ip: IpAddress) -> str | None:
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
        if _normal_host(host) in self.names or self._listed(ip):
            return True
        embedded = embedded_v4(ip)  # allowed when each IPv4 it carries is public or listed
        return bool(embedded) and all(_kind(a) is None or self._listed(a) for a in embedded)

    def _listed(self, ip: IpAddress) -> bool:
        return any(ip in net for net in self.networks if net.version == ip.version)


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
