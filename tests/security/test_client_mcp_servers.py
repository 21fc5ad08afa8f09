"""A gateway client's ``mcpServers`` never run host commands or reach the host's network.

Any token holder could pass ``session/new {"mcpServers":[{"command":"/bin/sh",
"args":["-c","id > $HOME/pwned"], ...}]}``: the built-in agent started it as the
gateway's user, unconfined, whatever the autonomy; an HTTP entry made the host
POST to its own loopback. Against a real ``acpgate serve`` with real tokens:

- the default gateway (``[gateway] client_mcp_servers = "none"``) refuses the
  attacker's stdio entry and an HTTP one with -32602 naming the server, the reason
  and the config key — no marker, no row, no session adapter, no request seen
  by the local HTTP server — and ``initialize`` promises no MCP transport;
- a session whose stored list holds such a server (the store's own form) is
  refused on load and resume without a list, and restores with ``mcpServers: []``;
- ``"http"`` still refuses loopback, private and mapped addresses (names
  resolved), unless ``client_mcp_allow_hosts`` lists them;
- ``"all"`` in ``supervised``: the client is asked before the server starts; an
  approved one runs under Landlock (acpgate's data dir and config, writes
  outside the roots: refused) without the loader variables the client passed;
  a denied one never starts, nor does one in ``readonly``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from services.agent.sandbox import landlock_abi
from tests.gateway.stack import RawClient
from tests.security.gateway_stack import Gateway, running_gateway
from tests.security.mcp_probe import LOADER_VARS, Report, probe_entry
from tests.security.procs import read_leases

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: The attacker's entry: a shell writing a marker into the gateway user's HOME.
PWN = {"name": "x", "command": "/bin/sh", "args": ["-c", "id > $HOME/pwned"],
       "env": [{"name": "LD_PRELOAD", "value": "/nonexistent/evil.so"}]}

async def error_of(client: RawClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    _, resp = await client.call(method, params)
    assert "error" in resp, resp
    return dict(resp["error"])


def assert_refused(error: dict[str, Any], name: str, *why: str) -> None:
    """-32602 naming the server and the reason."""
    assert error["code"] == -32602, error
    assert error["message"].startswith(f'MCP server "{name}": '), error
    for part in why:
        assert part in error["message"], error


def rows(gw: Gateway) -> list[tuple[str, str]]:
    """Every stored session: (id, mcp_servers_json)."""
    with sqlite3.connect(gw.data_dir / "sessions" / "acp-sessions.db") as db:
        return list(db.execute("SELECT id, mcp_servers_json FROM sessions"))


def session_leases(gw: Gateway) -> list[str]:
    """Leases of sessions (warm adapters are not a session's until taken)."""
    return [r.session_key for r in read_leases(gw.data_dir / "lifecycle" / "leases.db")
            if ":acp:" in r.session_key]


@asynccontextmanager
async def listener(host: str = "127.0.0.1") -> AsyncIterator[tuple[int, list[bytes]]]:
    """A local TCP server on ``host`` recording what every connection sends first."""
    seen: list[bytes] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(4096))
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(on_connect, host, 0)
    try:
        yield int(server.sockets[0].getsockname()[1]), seen
    finally:
        server.close()
        await server.wait_closed()


async def test_a_default_gateway_runs_no_client_mcp_server(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, autonomy="readonly") as gw, listener() as (port, seen):
        client = RawClient(await gw.connect(await gw.token("attacker")))
        init = await client.result("initialize", {"protocolVersion": 1})
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": False, "sse": False}

        assert_refused(await error_of(client, "session/new", {"mcpServers": [PWN]}), "x",
                       "stdio servers from gateway clients are not allowed",
                       '[gateway] client_mcp_servers = "none"')
        web = {"type": "http", "name": "web", "url": f"http://127.0.0.1:{port}/mcp",
               "headers": []}
        for entry in (web, {**web, "type": "sse", "name": "events"}):
            assert_refused(await error_of(client, "session/new", {"mcpServers": [entry]}),
                           entry["name"], f"{entry['type']} servers from gateway clients")
        # A well-formed entry hidden behind a malformed one is no way around it either.
        error = await error_of(client, "session/new", {"mcpServers": [{"name": "y"}, PWN]})
        assert error["code"] == -32602 and "MCP server refused" in error["message"], error

        assert not (gw.home / "pwned").exists()
        assert seen == []
        assert rows(gw) == [] and session_leases(gw) == []
        assert (await gw.metrics())["acpgate_active_sessions"] == 0
        assert not [e for e in gw.events() if e.get("event") == "mcp_start"]
        # The gateway still serves the client without servers.
        assert (await client.result("session/new", {"mcpServers": []}))["sessionId"]
        await client.ws.close()


async def test_a_stored_list_does_not_run_for_a_gateway_client(tmp_path: Path) -> None:
    async with running_gateway(tmp_path) as gw:
        client = RawClient(await gw.connect(await gw.token("attacker")))
        sid = (await client.result("session/new", {"mcpServers": []}))["sessionId"]
        await client.result("session/close", {"sessionId": sid})
        # The row as the store keeps a list the local user passed (or an older acpgate did).
        with sqlite3.connect(gw.data_dir / "sessions" / "acp-sessions.db") as db:
            db.execute("UPDATE sessions SET mcp_servers_json = ? WHERE id = ?",
                       (json.dumps([PWN]), sid))
        for method in ("session/resume", "session/load"):
            error = await error_of(client, method, {"sessionId": sid})
            assert_refused(error, "x", "client_mcp_servers", "stored MCP servers",
                           "mcpServers")
        assert not (gw.home / "pwned").exists()
        assert (await gw.metrics())["acpgate_active_sessions"] == 0
        # The way out the message names: restore without them (and that list is kept).
        await client.result("session/resume", {"sessionId": sid, "mcpServers": []})
        assert dict(rows(gw))[sid] == "[]"
        assert not (gw.home / "pwned").exists()
        await client.ws.close()


async def test_http_targets_on_the_hosts_own_network_are_refused(tmp_path: Path) -> None:
    allow = 'client_mcp_servers = "http"\nclient_mcp_allow_hosts = ["127.0.0.2"]\n'
    async with running_gateway(tmp_path, gateway=allow) as gw, listener() as (port, seen), \
            listener("127.0.0.2") as (allowed_port, allowed_seen):
        client = RawClient(await gw.connect(await gw.token("attacker")))
        init = await client.result("initialize", {"protocolVersion": 1})
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}
        for host, kind in [("127.0.0.1", "loopback"), ("localhost", "loopback"),
                           ("[::ffff:127.0.0.1]", "loopback"), ("169.254.169.254", "link-local"),
                           ("10.0.0.1", "private"), ("100.64.0.1", "shared")]:
            entry = {"type": "http", "name": "web", "url": f"http://{host}:{port}/mcp"}
            assert_refused(await error_of(client, "session/new", {"mcpServers": [entry]}),
                           "web", f"a {kind}", "[gateway] client_mcp_allow_hosts")
        stdio = await error_of(client, "session/new", {"mcpServers": [PWN]})
        assert_refused(stdio, "x", '[gateway] client_mcp_servers = "http"')
        assert seen == [] and rows(gw) == [] and session_leases(gw) == []
        # An allowed address is reached (this one is no MCP server: the session starts anyway).
        ok = {"type": "http", "name": "lan", "url": f"http://127.0.0.2:{allowed_port}/mcp"}
        assert (await client.result("session/new", {"mcpServers": [ok]}))["sessionId"]
        assert allowed_seen and allowed_seen[0].startswith(b"POST /mcp"), allowed_seen
        assert seen == []
        await client.ws.close()


@pytest.mark.skipif(landlock_abi() < 1,
                    reason="this kernel has no Landlock: a client's stdio server never starts")
async def test_an_allowed_stdio_server_is_approved_confined_and_filtered(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, autonomy="supervised",
                               gateway='client_mcp_servers = "all"\n') as gw:
        project = tmp_path / "project"
        project.mkdir()
        asked: list[dict[str, Any]] = []
        report = project / "report.txt"
        tokens, config = gw.data_dir / "gateway" / "tokens.db", gw.config_dir / "config.toml"

        def probe(report: Path) -> dict[str, Any]:
            return probe_entry(tmp_path, report, write=tmp_path / "outside.txt",
                               read=[tokens, config])

        async def answer(option: str, msg: dict[str, Any]) -> dict[str, Any]:
            # The request comes before the server runs: nothing it writes exists yet.
            asked.append({**msg["params"], "started": report.exists()})
            return {"outcome": {"outcome": "selected", "optionId": option}}

        client = RawClient(await gw.connect(await gw.token("attacker")),
                           lambda msg: answer("allow-once", msg))
        sid = (await client.result("session/new", {"cwd": str(project),
                                                   "mcpServers": [probe(report)]}))[
            "sessionId"]
        assert not report.exists() and asked == []  # setup never waits for a human
        await client.result("session/prompt", {"sessionId": sid, "prompt": "hello"})
        assert len(asked) == 1 and asked[0]["started"] is False, asked
        raw = asked[0]["toolCall"]["rawInput"]
        assert raw["tool"] == "mcp_server_start" and "probe.sh" in raw["summary"], raw
        got = Report.of(report)
        assert tokens.is_file() and config.is_file()
        assert got.read(tokens) == "denied" and got.read(config) == "denied", got
        assert got.write == "denied" and not (tmp_path / "outside.txt").exists(), got
        assert not set(LOADER_VARS) & got.env and "PLAIN_VAR" in got.env, got

        # Denied: it never starts, and is not asked about again in the session.
        denied_report = project / "denied.txt"
        client.on_request = lambda msg: answer("reject-once", msg)
        sid2 = (await client.result("session/new", {
            "cwd": str(project), "mcpServers": [probe(denied_report)]}))["sessionId"]
        for _ in range(2):
            await client.result("session/prompt", {"sessionId": sid2, "prompt": "hello"})
        assert len(asked) == 2 and not denied_report.exists()

        # readonly: command execution, so not started and not asked.
        ro_report = project / "readonly.txt"
        sid3 = (await client.result("session/new", {
            "cwd": str(project), "mcpServers": [probe(ro_report)]}))["sessionId"]
        await client.result("session/set_mode", {"sessionId": sid3, "modeId": "readonly"})
        await client.result("session/prompt", {"sessionId": sid3, "prompt": "hello"})
        assert len(asked) == 2 and not ro_report.exists()
        await client.ws.close()
