"""The rules for a client's mcpServers, and their `_meta.acpgate.clientMcp` form."""

from __future__ import annotations

from typing import Any

import pytest

from services.common.mcp_policy import ClientMcpRules
from services.common.mcp_servers import McpHttpServer, McpStdioServer

STDIO = McpStdioServer(name="s", command="/bin/true")
HTTP = McpHttpServer(name="h", url="https://example.com/mcp")
SSE = McpHttpServer(name="e", url="https://example.com/sse", transport="sse")


def test_the_local_user_may_pass_everything() -> None:
    local = ClientMcpRules.for_connection("none", ("x",), remote=False)
    assert local == ClientMcpRules() and local.allows_http
    assert [local.kind_refusal(s) for s in (STDIO, HTTP, SSE)] == [None, None, None]


@pytest.mark.parametrize(("setting", "stdio", "http"), [
    ("none", False, False), ("http", False, True), ("all", True, True)])
def test_a_remote_client_may_pass_what_the_setting_allows(setting: str, stdio: bool,
                                                          http: bool) -> None:
    rules = ClientMcpRules.for_connection(setting, (), remote=True)
    assert (rules.kind_refusal(STDIO) is None) is stdio
    assert (rules.kind_refusal(HTTP) is None) is http and (rules.kind_refusal(SSE) is None) is http
    assert rules.allows_http is http
    if not stdio:
        assert rules.kind_refusal(STDIO) == ("stdio servers from gateway clients are not allowed "
                                             f'([gateway] client_mcp_servers = "{setting}")')


def test_meta_round_trip_and_fail_closed() -> None:
    rules = ClientMcpRules.for_connection("http", ("10.0.0.0/8",), remote=True)
    assert ClientMcpRules.from_meta(rules.to_meta()) == rules
    assert ClientMcpRules.from_meta(ClientMcpRules().to_meta()) == ClientMcpRules()
    strict = ClientMcpRules(remote=True, servers="none")
    bad: list[Any] = [None, "all", {}, {"remote": "no"}, {"remote": True, "servers": "everything"},
                      {"remote": True, "servers": "all", "allowHosts": "x"},
                      {"remote": 0, "servers": "all"}]
    for value in bad:
        assert ClientMcpRules.from_meta(value) == strict, value
