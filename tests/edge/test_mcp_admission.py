"""The edge's check of a client's mcpServers: what passes on, and the refusals."""

from __future__ import annotations

from typing import Any

import pytest

from services.common.jsonrpc import JsonRpcError
from services.common.mcp_policy import ClientMcpRules
from services.edge.dialect.mcp_admission import admitted_servers

STDIO = {"name": "fs", "command": "/bin/fs", "args": ["-v"],
         "env": [{"name": "TOKEN", "value": "t"}], "_meta": {"x": 1}}
WEB = {"type": "http", "name": "web", "url": "https://mcp.example.com/mcp",
       "headers": [{"name": "Authorization", "value": "Bearer b"}]}


def resolving(*answers: str) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        return list(answers)
    return resolve


async def refusal(rules: ClientMcpRules, servers: list[Any], **kw: Any) -> str:
    with pytest.raises(JsonRpcError) as err:
        await admitted_servers(rules, servers, **kw)
    assert err.value.code == -32602
    return err.value.message


async def test_the_local_users_list_passes_as_given() -> None:
    servers = [STDIO, {"name": "broken"}, WEB]
    assert await admitted_servers(ClientMcpRules(), servers) is servers


async def test_a_remote_clients_list_passes_checked_and_in_acp_form() -> None:
    rules = ClientMcpRules(remote=True, servers="all")
    got = await admitted_servers(rules, [STDIO, WEB], resolve=resolving("93.184.216.34"))
    assert got == [{"name": "fs", "command": "/bin/fs", "args": ["-v"],
                    "env": [{"name": "TOKEN", "value": "t"}]},  # unchecked fields dropped
                   {"type": "http", "name": "web", "url": "https://mcp.example.com/mcp",
                    "headers": [{"name": "Authorization", "value": "Bearer b"}]}]


async def test_refusals_name_the_server_why_and_the_key() -> None:
    none = ClientMcpRules(remote=True, servers="none")
    assert await refusal(none, [STDIO]) == ('MCP server "fs": stdio servers from gateway clients '
                                            'are not allowed ([gateway] client_mcp_servers = '
                                            '"none")')
    http = ClientMcpRules(remote=True, servers="http")
    message = await refusal(http, [WEB], resolve=resolving("93.184.216.34", "10.0.0.7"))
    assert message == ('MCP server "web": mcp.example.com (10.0.0.7) is a private address, '
                       "which gateway clients may not reach (an operator may allow it with "
                       "[gateway] client_mcp_allow_hosts)")
    assert (await refusal(http, [{"name": "y"}])).startswith(
        "MCP server refused: mcpServers[0] `y`: `command` must be a non-empty string")
    stored = await refusal(none, [STDIO], stored=True)
    assert stored.startswith('MCP server "fs": stdio') and "stored MCP servers" in stored
    allowed = ClientMcpRules(remote=True, servers="http", allow_hosts=("10.0.0.0/8",))
    assert await admitted_servers(allowed, [WEB], resolve=resolving("10.0.0.7")) == [WEB]
