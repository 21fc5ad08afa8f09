"""A gateway client's MCP servers in the agent: start rules, confined command, checked connects."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpcore2
import pytest

from services.agent.mcp.confine import AWAITING, NO_LANDLOCK, READONLY, StartGate, Verdict
from services.agent.mcp.http_guard import CheckedBackend
from services.agent.mcp.launch import ClientGuard, Launch
from services.agent.sandbox import __file__ as SANDBOX
from services.common.mcp_servers import McpStdioServer
from services.common.net_targets import HostAllowList, TargetRefused
from services.common.policy import SecurityPolicy

SPEC = McpStdioServer(name="x", command="node", args=("server.js",),
                      env=(("NODE_OPTIONS", "--require evil"), ("TOKEN", "t")))


class Asked:
    """The approval callback: records each server asked about, answers ``why``."""

    def __init__(self, why: str | None = None) -> None:
        self.why = why
        self.asked: list[str] = []

    async def __call__(self, spec: McpStdioServer) -> str | None:
        self.asked.append(spec.name)
        return self.why


def gate(autonomy: str, approve: Asked, *, landlock: int = 7, **policy: Any) -> StartGate:
    async def resolve(host: str, port: int) -> list[str]:
        raise AssertionError("no resolution expected")

    p = SecurityPolicy(workspace_dir="/tmp", autonomy=autonomy, **policy)
    return StartGate(SPEC, ClientGuard(policy=lambda: p, approve=approve,
                                       landlock=lambda: landlock, resolve=resolve))


async def test_start_rules() -> None:
    asked = Asked()
    assert await gate("full", asked, landlock=0).check(ask=True) == (Verdict.NEVER, NO_LANDLOCK)
    assert await gate("readonly", asked).check(ask=True) == (Verdict.WAIT, READONLY)
    assert await gate("full", asked).check(ask=True) == (Verdict.GO, "")
    assert asked.asked == []
    supervised = gate("supervised", asked)
    assert await supervised.check(ask=False) == (Verdict.WAIT, AWAITING)  # never during setup
    assert await supervised.check(ask=True) == (Verdict.GO, "") and asked.asked == ["x"]
    assert await supervised.check(ask=True) == (Verdict.GO, "") and asked.asked == ["x"]
    denied = Asked("The user denied the `mcp_server_start` call.")
    assert await gate("supervised", denied).check(ask=True) == \
        (Verdict.NEVER, "not started: The user denied the `mcp_server_start` call.")
    # The operator may approve the start like any tool.
    auto = gate("supervised", asked, auto_approve=("mcp_server_start",))
    assert await auto.check(ask=False) == (Verdict.GO, "")


async def test_the_command_goes_through_the_trampoline_with_a_filtered_environment(
        tmp_path: Any) -> None:
    g = gate("supervised", Asked(), forbidden_paths=(str(tmp_path),))
    launch = Launch(session_id="s", cwd="/tmp", startup_timeout=1, call_timeout=1,
                    client_version="v", env={"PATH": "/usr/bin", "LD_PRELOAD": "/x.so",
                                             "PYTHONPATH": "/y"})
    argv, env = await g.command(launch)
    assert argv[:3] == [sys.executable, "-I", SANDBOX]
    assert argv[4:] == ["--", "node", "server.js"]
    assert json.loads(argv[3])["forbidden"] == [str(tmp_path)]
    assert env == {"PATH": "/usr/bin", "TOKEN": "t"}


class Recording(httpcore2.AsyncNetworkBackend):
    """An inner backend that records where it was asked to connect (and connects nowhere)."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
                          local_address: str | None = None,
                          socket_options: Any = None) -> httpcore2.AsyncNetworkStream:
        self.hosts.append(host)
        raise httpcore2.ConnectError("refused")


async def test_connections_go_to_the_checked_address_only() -> None:
    answers = ["127.0.0.2"]

    async def resolve(host: str, port: int) -> list[str]:
        return list(answers)

    inner = Recording()
    allowed = CheckedBackend(HostAllowList.parse(["127.0.0.0/8"]), resolve, inner)
    with pytest.raises(httpcore2.ConnectError):
        await allowed.connect_tcp("mcp.example", 80)
    assert inner.hosts == ["127.0.0.2"]  # the address checked, never the name again
    answers[:] = ["8.8.8.8", "10.0.0.1"]
    strict = CheckedBackend(HostAllowList(), resolve, inner)
    with pytest.raises(TargetRefused, match=r"mcp.example \(10.0.0.1\) is a private address"):
        await strict.connect_tcp("mcp.example", 80)
    assert inner.hosts == ["127.0.0.2"]  # nothing connected
