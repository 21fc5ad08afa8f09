"""Which addresses a gateway client's HTTP/SSE MCP server may point at."""

from __future__ import annotations

import ipaddress

import pytest

from services.common.net_targets import (
    HostAllowList,
    Resolver,
    TargetRefused,
    address_kind,
    checked_addresses,
    url_target,
)


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("fd12:3456::1", "private"),
    ("100.64.0.1", "shared (CGNAT)"), ("100.127.255.254", "shared (CGNAT)"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("192.0.2.1", "reserved"), ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    # IPv6 forms that carry an IPv4 address are judged by it.
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
    ("64:ff9b::a9fe:a9fe", "link-local"), ("2002:7f00:1::", "loopback"),
    ("8.8.8.8", None), ("1.1.1.1", None), ("2606:4700:4700::1111", None),
    ("100.128.0.1", None), ("172.32.0.1", None),
])
def test_address_kind(address: str, kind: str | None) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


def test_allow_list_names_addresses_and_networks() -> None:
    allow = HostAllowList.parse(["MCP.Internal.", "10.1.0.0/16", "127.0.0.2", "fd00::/8"])
    ip = ipaddress.ip_address
    assert allow.allows("mcp.internal", ip("10.200.0.1"))  # a listed name: any address
    assert allow.allows("other", ip("10.1.2.3")) and allow.allows("x", ip("127.0.0.2"))
    assert allow.allows("x", ip("::ffff:10.1.0.9"))  # the IPv4 it stands for is listed
    assert allow.allows("x", ip("fd00::5"))
    assert not allow.allows("other", ip("10.2.0.1")) and not allow.allows("x", ip("127.0.0.1"))
    for bad in ("http://x", "a b", "10.0.0.0/33", "", "-x-"):
        with pytest.raises(ValueError, match="not a host name, an IP address or a CIDR"):
            HostAllowList.parse([bad])


def test_url_target() -> None:
    assert url_target("http://Example.com/mcp") == ("example.com", 80)
    assert url_target("https://example.com/mcp") == ("example.com", 443)
    assert url_target("http://[::1]:8080/x") == ("::1", 8080)


def resolver(*answers: str) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        return list(answers)
    return resolve


async def test_every_resolved_address_must_pass() -> None:
    allow = HostAllowList()
    assert await checked_addresses("a.example", 80, allow, resolver("8.8.8.8")) == ["8.8.8.8"]
    with pytest.raises(TargetRefused) as refused:
        await checked_addresses("a.example", 80, allow, resolver("8.8.8.8", "127.0.0.1"))
    assert str(refused.value).startswith("a.example (127.0.0.1) is a loopback address")
    assert "[gateway] client_mcp_allow_hosts" in str(refused.value)
    # A literal is not resolved, and names itself once.
    with pytest.raises(TargetRefused, match=r"^10\.0\.0\.1 is a private address"):
        await checked_addresses("10.0.0.1", 80, allow, resolver("8.8.8.8"))
    allowed = HostAllowList.parse(["a.example"])
    assert await checked_addresses("a.example", 80, allowed, resolver("127.0.0.1")) == \
        ["127.0.0.1"]


async def test_a_name_that_does_not_resolve_cannot_be_checked() -> None:
    async def fails(host: str, port: int) -> list[str]:
        raise OSError(-2, "Name or service not known")

    with pytest.raises(TargetRefused, match=r"cannot be resolved \(Name or service not known\)"):
        await checked_addresses("nowhere.example", 80, HostAllowList(), fails)
    with pytest.raises(TargetRefused, match="no address"):
        await checked_addresses("nowhere.example", 80, HostAllowList(), resolver())
