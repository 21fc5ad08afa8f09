"""Which MCP servers a restored session starts: the passed list, else the stored one
(and whether it was passed: a passed list becomes the stored one)."""

from __future__ import annotations

import pytest

from services.edge.params import encode_mcp_servers, restore_mcp_servers

FS = {"name": "fs", "command": "/bin/fs", "args": [], "env": []}


@pytest.mark.parametrize(("params", "stored", "expected"), [
    ({}, encode_mcp_servers([FS]), ([FS], False)),  # none passed: the stored list
    ({"mcpServers": None}, encode_mcp_servers([FS]), ([FS], False)),
    ({"mcpServers": "junk"}, encode_mcp_servers([FS]), ([FS], False)),
    ({}, "", ([], False)),  # a row from before v3 has none
    ({}, "not json", ([], False)),
    ({"mcpServers": [FS]}, encode_mcp_servers([FS]), ([FS], True)),  # same list: stored again
    ({"mcpServers": []}, encode_mcp_servers([FS]), ([], True)),  # an empty list replaces
    ({"mcpServers": [FS]}, "", ([FS], True)),
    ({"mcpServers": []}, "", ([], True)),
])
def test_restore_list(params: dict, stored: str, expected: tuple[list, bool]) -> None:
    assert restore_mcp_servers(params, stored) == expected
