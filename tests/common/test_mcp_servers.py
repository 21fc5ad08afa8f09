"""ACP ``McpServer`` shapes: what clients pass and what config.toml holds."""

from __future__ import annotations

import pytest

from services.common.mcp_servers import (
    McpHttpServer,
    McpServerError,
    McpStdioServer,
    parse_server,
    parse_servers,
    redacted,
    to_json,
)


def test_the_three_acp_variants() -> None:
    stdio = parse_server({"name": "fs", "command": "/bin/fs", "args": ["-v"],
                          "env": [{"name": "TOKEN", "value": "t0p"}]})
    assert stdio == McpStdioServer("fs", "/bin/fs", ("-v",), (("TOKEN", "t0p"),))
    assert parse_server({"type": "stdio", "name": "fs", "command": "fs"}).args == ()
    http = parse_server({"type": "http", "name": "web", "url": "https://h/mcp",
                         "headers": [{"name": "Authorization", "value": "Bearer x"}]})
    assert http == McpHttpServer("web", "https://h/mcp", "http", (("Authorization", "Bearer x"),))
    sse = parse_server({"type": "sse", "name": "old", "url": "http://h/sse", "headers": []})
    assert sse.transport == "sse"


@pytest.mark.parametrize(("entry", "needle"), [
    ({"command": "x"}, "`name` must be a non-empty string"),
    ({"name": " ", "command": "x"}, "`name` must be a non-empty string"),
    ({"name": "a"}, "`a`: `command` must be a non-empty string"),
    ({"name": "a", "command": "x", "args": "-v"}, "`args` must be an array of strings"),
    ({"name": "a", "command": "x", "env": [{"name": "A=B", "value": "1"}]},
     "`env[0].name` is not a valid name"),
    ({"name": "a", "command": "x", "env": {"A": "1"}}, "`env` must be an array"),
    ({"type": "http", "name": "a", "url": "ftp://h"}, "`url` must be an http:// or https:// URL"),
    ({"type": "http", "name": "a", "url": "https://h",
      "headers": [{"name": "Bad Header", "value": "1"}]}, "`headers[0].name` is not a valid"),
    ({"type": "ws", "name": "a", "url": "ws://h"}, "unsupported `type` 'ws'"),
    ("fs", "expected an object"),
])
def test_malformed_entries_say_what_is_wrong(entry: object, needle: str) -> None:
    with pytest.raises(McpServerError, match=needle.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        parse_server(entry)


def test_a_list_skips_invalid_items_and_reports_them() -> None:
    servers, errors = parse_servers([{"name": "ok", "command": "x"}, {"name": "bad"}, 3])
    assert [s.name for s in servers] == ["ok"]
    assert errors == ["mcpServers[1] `bad`: `command` must be a non-empty string",
                      "mcpServers[2]: expected an object"]
    assert parse_servers(None) == ([], [])
    assert parse_servers("nope") == ([], ["mcpServers: expected an array of MCP server objects"])


def test_json_round_trip_and_redaction() -> None:
    entry = {"name": "fs", "command": "/bin/fs", "args": [],
             "env": [{"name": "TOKEN", "value": "t0p"}]}
    assert to_json(parse_server(entry)) == entry
    assert redacted(parse_server(entry))["env"] == [{"name": "TOKEN", "value": "<set>"}]
    web = {"type": "http", "name": "w", "url": "https://h", "headers": [
        {"name": "Authorization", "value": "Bearer s3cret"}]}
    assert to_json(parse_server(web)) == web
    assert "s3cret" not in str(redacted(parse_server(web)))
