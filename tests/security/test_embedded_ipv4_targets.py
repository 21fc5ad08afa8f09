"""A gateway client's MCP server URL may not reach the host's network by an IPv6 form of IPv4.

With ``[gateway] client_mcp_servers = "http"`` the edge refuses a target on a
loopback, private or link-local address. An IPv6 address that carries an IPv4
one — IPv4-compatible ``::127.0.0.1`` (``::7f00:1``), -mapped, -translated,
6to4, NAT64 (well-known and local-use), Teredo (server, and its obfuscated
client) — is the IPv4 it carries: written as a literal or what a name resolves
to, a non-public one is refused like the plain IPv4 address.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from services.common.net_targets import (
    HostAllowList,
    Resolver,
    TargetRefused,
    address_kind,
    checked_addresses,
)
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import running_gateway
from tests.security.test_client_mcp_servers import assert_refused, error_of, listener

#: (IPv6 address, the kind of the IPv4 it carries).
SMUGGLED_V4 = [
    ("::127.0.0.1", "loopback"), ("::7f00:1", "loopback"), ("::10.0.0.1", "private"),
    ("::a9fe:a9fe", "link-local"), ("::0.0.0.0", "unspecified"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:192.168.1.1", "private"),
    ("::ffff:0:127.0.0.1", "loopback"), ("::ffff:0:a00:1", "private"),
    ("::ffff:0:169.254.169.254", "link-local"),
    ("2002:7f00:1::", "loopback"), ("2002:c0a8:101:5::1", "private"),
    ("2002:a9fe:a9fe::", "link-local"),
    ("64:ff9b::127.0.0.1", "loopback"), ("64:ff9b::ac10:1", "private"),
    ("64:ff9b:1::7f00:1", "loopback"),  # local-use NAT64 with a /96 prefix
    ("64:ff9b:1:7f00:0:100::", "loopback"),  # … with a /48 prefix (bits 64-71 skipped)
    ("64:ff9b:1:0:a:0:100::", "private"),  # … with a /64 prefix
    # Teredo: server 8.8.8.8; client 127.0.0.1 obfuscated (XOR) / server 10.0.0.1.
    ("2001:0:808:808:8000:63bf:80ff:fffe", "loopback"),
    ("2001:0:a00:1:8000:63bf:f7f7:f7f7", "private"),
]
#: Public IPv4 in the same forms: still reachable (the IPv4 decides, not the form).
PUBLIC = ["::ffff:8.8.8.8", "::8.8.8.8", "::ffff:0:8.8.8.8", "2002:808:808::1",
          "64:ff9b::8.8.8.8", "2001:0:808:808:8000:63bf:f7f7:f7f7"]


def resolver(*answers: str) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        return list(answers)
    return resolve


@pytest.mark.parametrize(("address", "kind"), SMUGGLED_V4)
def test_an_ipv6_form_is_the_ipv4_it_carries(address: str, kind: str) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("address", PUBLIC)
def test_a_public_ipv4_in_an_ipv6_form_stays_reachable(address: str) -> None:
    assert address_kind(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(("address", "kind"), SMUGGLED_V4)
async def test_literals_and_resolved_names_are_refused(address: str, kind: str) -> None:
    allow = HostAllowList()
    with pytest.raises(TargetRefused, match=f"is an? {kind}"):
        await checked_addresses(address, 80, allow, resolver("8.8.8.8"))
    # A name that resolves to it (among public ones): the resolved address is judged.
    shown = re.escape(str(ipaddress.ip_address(address)))
    with pytest.raises(TargetRefused, match=rf"^mcp\.example \({shown}\) is an? {kind}"):
        await checked_addresses("mcp.example", 80, allow, resolver("8.8.8.8", address))


def test_the_allow_list_holds_the_carried_ipv4() -> None:
    allow = HostAllowList.parse(["127.0.0.0/8"])
    ip = ipaddress.ip_address
    assert allow.allows("x", ip("::7f00:1")) and allow.allows("x", ip("2002:7f00:1::"))
    assert not allow.allows("x", ip("::a00:1"))
    # Teredo carries two: the listed one does not let the other, unlisted private one in.
    assert not HostAllowList.parse(["8.8.8.8"]).allows(
        "x", ip("2001:0:a00:1:8000:63bf:f7f7:f7f7"))


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_gateway_refuses_ipv4_compatible_loopback(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, gateway='client_mcp_servers = "http"\n') as gw, \
            listener() as (port, seen):
        client = RawClient(await gw.connect(await gw.token("attacker")))
        await client.result("initialize", {"protocolVersion": 1})
        for host in ("[::127.0.0.1]", "[::7f00:1]", "[::ffff:0:7f00:1]", "[64:ff9b:1::7f00:1]"):
            entry = {"type": "http", "name": "web", "url": f"http://{host}:{port}/mcp"}
            assert_refused(await error_of(client, "session/new", {"mcpServers": [entry]}),
                           "web", "a loopback", "[gateway] client_mcp_allow_hosts")
        assert seen == []
        await client.ws.close()
