"""The built-in agent's side of a gateway client's MCP servers.

The edge refuses what ``[gateway] client_mcp_servers`` does not allow; what it
allows, the built-in agent runs under the rules the edge sends in
``_meta.acpgate.clientMcp``. In-process agent, real server processes, real
sockets, the attacker being the client whose ``mcpServers`` these are:

- ``full``: a stdio server starts without asking, but confined (a forbidden path
  unreadable and unwritable) and without loader variables, passed or inherited;
- without Landlock it never starts (a note says why), rather than unconfined;
- the operator's ``[agents.x] mcp_servers`` and the local user's servers stay as
  they were: unconfined, their environment untouched;
- an HTTP/SSE server whose host resolves to the host's own loopback *when the
  agent connects* (DNS rebinding: the edge saw something else) is never
  connected to; a host the operator allowed is, on the very address checked.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from services.agent.sandbox import landlock_abi
from services.common.mcp_servers import parse_server
from services.common.net_targets import system_resolver
from services.common.policy import SecurityPolicy
from tests.agent.harness import ScriptedProvider, make_config, running_agent, say
from tests.security.mcp_probe import LOADER_VARS, Report, probe_entry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

needs_landlock = pytest.mark.skipif(landlock_abi() < 1,
                                    reason="this kernel has no Landlock to confine with")

#: What the agent itself inherited: loader variables an operator's shell may well have.
AGENT_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": "/tmp/evil",
             "PYTHONSTARTUP": "/tmp/evil.py", "INHERITED_VAR": "kept"}


def remote(servers: str = "all", allow_hosts: tuple[str, ...] = ()) -> dict[str, Any]:
    """``_meta.acpgate.clientMcp`` as the edge sends it for a gateway client."""
    return {"remote": True, "servers": servers, "allowHosts": list(allow_hosts)}


def new_params(ws: Path, state: Path, autonomy: str, servers: list[dict[str, Any]],
               client_mcp: dict[str, Any] | None) -> dict[str, Any]:
    """``session/new`` as the edge sends it: the policy (``state`` forbidden) and the rules."""
    policy = SecurityPolicy(workspace_dir=str(ws), forbidden_paths=(str(state),),
                            autonomy=autonomy, workspace_only=autonomy != "full")
    meta: dict[str, Any] = {"policy": policy.to_json()}
    if client_mcp is not None:
        meta["clientMcp"] = client_mcp
    return {"cwd": str(ws), "mcpServers": servers, "_meta": {"acpgate": meta}}


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(workspace, a forbidden dir holding a secret, that secret)."""
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    state.mkdir()
    secret = state / "tokens.db"
    secret.write_text("SQLite format 3 — the gateway's tokens")
    return ws, state, secret


@needs_landlock
async def test_full_autonomy_starts_it_unasked_but_confined_and_filtered(
        tmp_path: Path, places: tuple[Path, Path, Path]) -> None:
    ws, state, secret = places
    report = ws / "report.txt"
    probe = probe_entry(tmp_path, report, write=state / "planted", read=[secret])
    async with running_agent(make_config(tmp_path, autonomy="full"), standalone=False,
                             environ=AGENT_ENV) as c:
        await c.call("session/new", new_params(ws, state, "full", [probe], remote()))
        got = Report.of(report)  # it ran during session/new: nobody was asked
        assert [m for m, _ in c.requests if m == "session/request_permission"] == []
        assert got.read(secret) == "denied" and got.write == "denied", got
        assert not (state / "planted").exists()
        assert not {*LOADER_VARS, "LD_LIBRARY_PATH", "PYTHONSTARTUP"} & got.env, got
        assert {"PLAIN_VAR", "INHERITED_VAR"} <= got.env, got


async def test_without_landlock_it_never_starts(tmp_path: Path,
                                                places: tuple[Path, Path, Path]) -> None:
    ws, state, secret = places
    report = ws / "report.txt"
    probe = probe_entry(tmp_path, report, write=ws / "w", read=[secret])
    provider = ScriptedProvider([say("ok")])
    async with running_agent(make_config(tmp_path, autonomy="full"), provider,
                             standalone=False, environ=AGENT_ENV, landlock=lambda: 0) as c:
        sid = (await c.call("session/new", new_params(ws, state, "full", [probe],
                                                      remote())))["sessionId"]
        await c.prompt(sid, "hello")
    assert not report.exists()
    system = provider.calls[0][0]
    assert "MCP server `probe` is unavailable: not started: this kernel has no Landlock" \
        in system, system


async def test_operator_and_local_servers_stay_as_they_were(
        tmp_path: Path, places: tuple[Path, Path, Path]) -> None:
    ws, state, secret = places
    operator_report, local_report = ws / "operator.txt", ws / "local.txt"
    (tmp_path / "op").mkdir()
    operator = probe_entry(tmp_path / "op", operator_report, write=state / "op", read=[secret],
                           name="ops")
    cfg = make_config(tmp_path, autonomy="full", mcp_servers=(parse_server(operator),))
    async with running_agent(cfg, standalone=False, environ=AGENT_ENV) as c:
        # A gateway client's session: the operator's server is still the operator's.
        await c.call("session/new", new_params(ws, state, "full", [], remote("none")))
        got = Report.of(operator_report)
        assert got.read(secret) == "done" and got.write == "done", got
        assert {"PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONSTARTUP"} <= got.env, got
    # The local user (no edge, or the edge's stdio connection): as an editor would run it.
    local = probe_entry(tmp_path, local_report, write=state / "local", read=[secret])
    async with running_agent(make_config(tmp_path, autonomy="full"), standalone=False,
                             environ=AGENT_ENV) as c:
        await c.call("session/new", new_params(ws, state, "full", [local], {"remote": False,
                                                                          "servers": "all"}))
        got = Report.of(local_report)
        assert got.read(secret) == "done" and "LD_PRELOAD" in got.env, got


@asynccontextmanager
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A local TCP server on 127.0.0.1 recording what every connection sends first."""
    seen: list[bytes] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(4096))
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1]), seen
    finally:
        server.close()
        await server.wait_closed()


def rebinding(*answers: str) -> Any:
    """A resolver whose ``rebind.example`` is under the attacker's control (it resolves to
    ``answers`` now, whatever it did when the edge looked); other names as the system's."""

    async def resolve(host: str, port: int) -> list[str]:
        if host == "rebind.example":
            return list(answers)
        return await system_resolver(host, port)

    return resolve


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_http_targets_are_checked_where_the_agent_connects(
        tmp_path: Path, places: tuple[Path, Path, Path], transport: str) -> None:
    ws, state, _ = places
    path = "/mcp" if transport == "http" else "/sse"
    provider = ScriptedProvider([say("ok")])
    async with listener() as (port, seen), running_agent(
            make_config(tmp_path), provider, standalone=False,
            resolve=rebinding("93.184.216.34", "127.0.0.1")) as c:
        entries = [{"type": transport, "name": name, "url": f"http://{host}:{port}{path}"}
                   for name, host in [("plain", "localhost"), ("rebound", "rebind.example")]]
        sid = (await c.call("session/new", new_params(ws, state, "supervised", entries,
                                                      remote("http"))))["sessionId"]
        await c.prompt(sid, "hello")
        assert seen == []  # neither name's loopback address was ever connected to
        system = provider.calls[0][0]
        assert "MCP server `plain` is unavailable: localhost (127.0.0.1) is a loopback" \
            in system or "localhost (::1) is a loopback" in system, system
        assert "rebind.example (127.0.0.1) is a loopback address" in system, system

    # A host the operator allows is reached — on the address that was checked.
    async with listener() as (port, seen), running_agent(
            make_config(tmp_path), standalone=False, resolve=rebinding("127.0.0.1")) as c:
        entry = {"type": transport, "name": "lan", "url": f"http://rebind.example:{port}{path}"}
        await c.call("session/new", new_params(ws, state, "supervised", [entry],
                                               remote("http", ("rebind.example",))))
        assert seen and f"host: rebind.example:{port}".encode() in seen[0].lower(), seen
