"""Sessions whose setup is cut short leak no agent, outside ``max_sessions`` or not.

The attacks, against a real ``acpgate serve``, looped with random timing:

- ``session/new`` (and ``session/load``/``resume`` of a stored session) naming an
  MCP server that never answers (``/bin/sleep 1000``: the agent waits 30 s for it,
  longer than the 15 s disconnect drain), the client gone 0.1–1.5 s in; the same
  without the MCP server (the setup finishes during the drain);
- a ``sessions_spawn`` tree with ``wait: false`` (a parent spawning a child that
  spawns a grandchild) whose parent is closed, loses its client, or has its agent
  killed 0.3–2.5 s into the turn.

Once every connection is gone, no lease may be open and no process of this
install may be left but the warm pools' — the leaked agents stayed until the
gateway stopped, while new sessions were still admitted. A new session is then
admitted, and the live adapters are exactly the live sessions'.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection

from tests.gateway.stack import RawClient
from tests.security.fake_model import call_message
from tests.security.gateway_stack import WAIT, Gateway, Token, running_gateway
from tests.security.procs import (
    LEASES_DB,
    birth_of,
    install_processes,
    kill_exact,
    lease_of,
    read_leases,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: The attacker's MCP server: it never speaks, so the agent's session/new waits 30 s for it.
SLOW_MCP = [{"name": "slow", "command": "/bin/sleep", "args": ["1000"], "env": []}]
#: A parent that spawns a child that spawns a grandchild, neither waiting (the session tools).
TREE = call_message("sessions_spawn", {
    "agent": "attacker", "wait": False, "label": "child",
    "prompt": call_message("sessions_spawn", {"agent": "attacker", "wait": False,
                                              "label": "grandchild", "prompt": "hello"})})
SLOW_SETUPS = 10
FAST_SETUPS = 6
TREES = 9


async def _read_all(ws: ClientConnection) -> None:
    """Read (and drop) whatever the gateway sends until the connection ends."""
    with contextlib.suppress(Exception):
        async for _ in ws:
            pass


async def _setup_then_gone(gw: Gateway, token: Token, method: str, params: dict[str, Any],
                           delay: float) -> None:
    """Send one setup request, and disconnect ``delay`` seconds later."""
    ws = await gw.connect(token)
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    reader = asyncio.create_task(_read_all(ws))
    await asyncio.sleep(delay)
    await ws.close()
    await reader


async def _stored_sessions(gw: Gateway, token: Token, count: int) -> list[str]:
    """``count`` sessions created and closed again (stored, inactive)."""
    client = RawClient(await gw.connect(token))
    sids = []
    for _ in range(count):
        sid = (await client.result("session/new", {}))["sessionId"]
        await client.result("session/close", {"sessionId": sid})
        sids.append(sid)
    await client.ws.close()
    return sids


async def _tree_cut_short(gw: Gateway, token: Token, how: str, delay: float) -> None:
    """A parent whose turn spawns a tree, cut ``delay`` seconds in: the parent closed
    (``close``), its client gone (``disconnect``) or its agent killed (``kill``)."""
    client = RawClient(await gw.connect(token))
    psid = (await client.result("session/new", {}))["sessionId"]
    await client.send("session/prompt", {"sessionId": psid, "prompt": TREE})
    reader = asyncio.create_task(_read_all(client.ws))
    await asyncio.sleep(delay)
    if how == "close":
        await client.send("session/close", {"sessionId": psid})
        await asyncio.sleep(0.5)
    elif how == "kill":
        lease = lease_of(gw.config_dir / LEASES_DB, f"agent:attacker:acp:{psid}")
        with contextlib.suppress(AssertionError):  # it may have exited on its own
            await kill_exact(lease.adapter_pid, await birth_of(lease.adapter_pid))
        await asyncio.sleep(0.5)
    await client.ws.close()
    await reader


async def _settled(gw: Gateway, name: str, value: float) -> None:
    for _ in range(int(WAIT * 10)):
        if (await gw.metrics())[name] == value:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} never read {value}")


async def _nothing_left(gw: Gateway, *, sessions: int = 0) -> None:
    """Every lease but the warm pools' and ``sessions`` open ones ended, and no process of
    this install carries a lease that is not warm or open (within a generous ceiling)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    db = gw.config_dir / LEASES_DB
    while True:
        leases = await asyncio.to_thread(read_leases, db)
        instance = leases[0].gateway_instance_id if leases else ""
        open_ = {r.lease_id for r in leases if r.state == "open"}
        live = {r.lease_id for r in leases if r.state in ("warm", "open")}
        marked = await asyncio.to_thread(install_processes, instance)
        stray = {lease: procs for lease, procs in marked.items() if lease not in live}
        if len(open_) == sessions and not stray:
            return
        if loop.time() > deadline:
            raise AssertionError(f"left behind: {len(open_)} open leases (want {sessions}), "
                                 f"processes of ended leases {stray}")
        await asyncio.sleep(0.2)


async def test_setups_cut_short_at_random_leave_no_agent_behind(tmp_path: Path) -> None:
    rng = random.Random()
    # One token races every setup: its share is the whole gateway.
    async with running_gateway(tmp_path, max_sessions=40, per_token=40,
                               # The trees whose client left detach: after
                               # the grace they are released like any disconnect's.
                               gateway="max_connections_per_token = 40\n"
                                       "detach_grace_secs = 2\n") as gw:
        token = await gw.token("racer")
        methods = [("session/new", "session/load", "session/resume")[i % 3]
                   for i in range(SLOW_SETUPS + FAST_SETUPS)]
        stored = iter(await _stored_sessions(gw, token, sum(m != "session/new" for m in methods)))
        setups = []
        for i, method in enumerate(methods):
            params: dict[str, Any] = {} if method == "session/new" else {
                "sessionId": next(stored)}
            if i < SLOW_SETUPS:
                params["mcpServers"] = SLOW_MCP
            setups.append(_setup_then_gone(gw, token, method, params, rng.uniform(0.1, 1.5)))
        racing = asyncio.gather(*setups)
        # The trees meanwhile, a few at a time (each is three agents).
        for start in range(0, TREES, 3):
            await asyncio.gather(*(
                _tree_cut_short(gw, token, ("close", "disconnect", "kill")[(start + i) % 3],
                                rng.uniform(0.3, 2.5)) for i in range(3)))
        await racing
        await _settled(gw, "acpgate_ws_connections", 0)
        await _nothing_left(gw)
        assert (await gw.metrics())["acpgate_active_sessions"] == 0

        # max_sessions is whole again, and only a live session has a live adapter.
        client = RawClient(await gw.connect(token))
        await client.result("session/new", {"agentAlias": "demo"})
        assert (await gw.metrics())["acpgate_active_sessions"] == 1
        await _nothing_left(gw, sessions=1)
        await client.ws.close()
